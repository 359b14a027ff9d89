//! The hostile bot's cases: what it lists and answers to one call, what the bridge must
//! pay for it and what its refusal note must say.

use super::*;

fn priced(name: &str, atoms: i64) -> Tool {
    tool(name, json!({"brmcp/priceAtoms": atoms}))
}

fn dynamic(name: &str) -> Tool {
    tool(name, json!({"brmcp/pricing": "dynamic"}))
}

/// A dynamically priced tool listed at least `least` and at most `most` atoms.
fn ranged(name: &str, least: i64, most: i64) -> Tool {
    tool(
        name,
        json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": least,
               "brmcp/priceMaxAtoms": most}),
    )
}

impl Case {
    /// A call of `call` the bot answers once with `answer`, which the bridge refuses
    /// to pay: nothing paid, the refusal note saying `note`.
    fn refused(
        name: &'static str,
        tools: Vec<Tool>,
        call: &'static str,
        answer: Answer,
        note: &'static str,
    ) -> Self {
        Self {
            name,
            tools,
            call,
            answers: vec![answer],
            paid: vec![],
            bound: 0,
            note: Some(note),
            list_first: false,
        }
    }

    /// A call of `call` the bot answers with `answers`, for which the bridge pays
    /// `atoms` once, without a refusal note.
    fn paid(
        name: &'static str,
        tools: Vec<Tool>,
        call: &'static str,
        answers: Vec<Answer>,
        atoms: u64,
    ) -> Self {
        Self {
            name,
            tools,
            call,
            answers,
            paid: vec![atoms],
            bound: atoms,
            note: None,
            list_first: false,
        }
    }

    /// The case with the agent listing the tools before it calls.
    fn listed_first(mut self) -> Self {
        self.list_first = true;
        self
    }
}

pub(super) fn cases() -> Vec<Case> {
    let fortune = || vec![priced("fortune", 10), priced("free", 0), dynamic("oracle")];
    let q = |price: i64, balance: i64, shortfall: i64| {
        quote("fortune", json!(price), json!(balance), json!(shortfall))
    };
    let sq = |price: i64| quote("search", json!(price), json!(0), json!(price));
    let malformed = |shortfall: Value| {
        Case::refused(
            "malformed shortfall",
            fortune(),
            "fortune",
            Answer::Quote(quote("fortune", json!(10), json!(0), shortfall)),
            "shortfallAtoms is not a whole number of atoms",
        )
    };
    let mut cases = vec![
        Case::refused(
            "listed free, asks 900",
            fortune(),
            "free",
            Answer::Quote(quote("free", json!(900), json!(0), json!(900))),
            "the tool is listed free, the bot asks 900 atoms",
        ),
        Case::refused(
            "priceAtoms 10 with shortfallAtoms 900",
            fortune(),
            "fortune",
            Answer::Quote(q(10, 0, 900)),
            "the bot asks 900 atoms for a 10-atom call",
        ),
        Case::refused(
            "listed at 10, quoted at 900",
            fortune(),
            "fortune",
            Answer::Quote(q(900, 0, 900)),
            "the tool is listed at 10 atoms, the bot quotes 900",
        ),
        Case::refused(
            "shortfallAtoms 0",
            fortune(),
            "fortune",
            Answer::Quote(q(10, 0, 0)),
            "the bot quotes a shortfall of 0 atoms",
        ),
        malformed(json!(5.0)),
        malformed(json!("5")),
        malformed(json!(-5)),
        malformed(json!(9_223_372_036_854_775_808u64)),
        Case::refused(
            "price above i64",
            fortune(),
            "fortune",
            Answer::Quote(quote("fortune", json!(u64::MAX), json!(0), json!(10))),
            "priceAtoms is not a whole number of atoms",
        ),
        Case::refused(
            "missing balance",
            fortune(),
            "fortune",
            Answer::Quote(json!({"error": "payment_required", "tool": "fortune",
                "priceAtoms": 10, "shortfallAtoms": 10, "acceptedRails": ["tip"]})),
            "payment_required without balanceAtoms",
        ),
        Case::refused(
            "an extra field",
            fortune(),
            "fortune",
            Answer::Quote({
                let mut body = q(10, 0, 10);
                body["refundAtoms"] = json!(0);
                body
            }),
            "payment_required with an unknown field",
        ),
        Case::refused(
            "numbers that do not add up",
            fortune(),
            "fortune",
            Answer::Quote(q(10, 0, 6)),
            "price 10, balance 0 and shortfall 6 atoms, which do not add up",
        ),
        Case::refused(
            "a quote for another tool",
            fortune(),
            "fortune",
            Answer::Quote(quote("oracle", json!(10), json!(0), json!(10))),
            "payment_required names another tool",
        ),
        Case::refused(
            "an unlisted tool",
            fortune(),
            "ghost",
            Answer::Quote(quote("ghost", json!(10), json!(0), json!(10))),
            "the tool is not in the bot's tools/list",
        ),
        Case::refused(
            "a tool listed without a price",
            vec![tool("plain", json!({}))],
            "plain",
            Answer::Quote(quote("plain", json!(10), json!(0), json!(10))),
            "the tool is listed without a price",
        ),
        Case::refused(
            "a malformed listed price",
            vec![tool("odd", json!({"brmcp/priceAtoms": 10.5}))],
            "odd",
            Answer::Quote(quote("odd", json!(10), json!(0), json!(10))),
            "brmcp/priceAtoms is not a whole number of atoms",
        ),
        Case::paid(
            "the price changed since tools/list, and the fresh listing agrees",
            fortune(),
            "fortune",
            vec![Answer::Relist(vec![priced("fortune", 20)], q(20, 0, 20))],
            20,
        ),
        Case::refused(
            "a quote the fresh listing still contradicts",
            fortune(),
            "fortune",
            Answer::Relist(vec![priced("fortune", 10)], q(20, 0, 20)),
            "the tool is listed at 10 atoms, the bot quotes 20",
        ),
        Case::paid(
            "the shortfall of a fixed price",
            fortune(),
            "fortune",
            vec![Answer::Quote(q(10, 4, 6))],
            6,
        ),
        Case {
            name: "a higher shortfall after payment",
            tools: fortune(),
            call: "fortune",
            answers: vec![Answer::Quote(q(10, 4, 6)), Answer::Quote(q(10, 0, 10))],
            paid: vec![6],
            bound: 6,
            note: Some("after 6 atoms paid against a 10-atom price, the bot asks 10 atoms"),
            list_first: false,
        },
        Case::paid(
            "the same shortfall after payment is waited on, never paid again",
            fortune(),
            "fortune",
            vec![Answer::Quote(q(10, 0, 10)); 5],
            10,
        ),
        Case::paid(
            "dynamic pricing within the per-call cap",
            fortune(),
            "oracle",
            vec![Answer::Quote(quote(
                "oracle",
                json!(900),
                json!(0),
                json!(900),
            ))],
            900,
        ),
        Case::refused(
            "dynamic pricing above the per-call cap",
            fortune(),
            "oracle",
            Answer::Quote(quote("oracle", json!(5000), json!(0), json!(5000))),
            "5000 atoms exceeds the per-call cap (1000)",
        ),
        Case::refused(
            "a bot that takes no tips",
            fortune(),
            "fortune",
            Answer::Quote({
                let mut body = q(10, 0, 10);
                body["acceptedRails"] = json!(["card"]);
                body
            }),
            "the bot does not accept tips",
        ),
        Case::paid(
            "a dynamic quote within the listed bound",
            vec![bounded("search", json!(500))],
            "search",
            vec![Answer::Quote(sq(400))],
            400,
        )
        .listed_first(),
        Case::refused(
            "a dynamic quote above the listed bound",
            vec![bounded("search", json!(500))],
            "search",
            Answer::Quote(sq(900)),
            "the bot quotes 900 atoms, above the 500 atoms at most the tool was listed at",
        )
        .listed_first(),
        Case::refused(
            "a dynamic quote above the bound of the bridge's own listing",
            vec![bounded("search", json!(500))],
            "search",
            Answer::Quote(sq(501)),
            "the bot quotes 501 atoms, above the 500 atoms at most",
        ),
        Case::refused(
            "a dynamic quote below the listed least",
            vec![ranged("search", 10, 500)],
            "search",
            Answer::Quote(sq(3)),
            "the bot quotes 3 atoms, below the 10 atoms at least the tool was listed at",
        )
        .listed_first(),
        Case::refused(
            "a bound raised between listing and call: the bound the agent saw binds",
            vec![bounded("search", json!(500))],
            "search",
            Answer::Changed(vec![bounded("search", json!(5000))], sq(900)),
            "the bot quotes 900 atoms, above the 500 atoms at most the tool was listed at",
        )
        .listed_first(),
        Case::refused(
            "a bound lowered between listing and call: the lower binds",
            vec![bounded("search", json!(5000))],
            "search",
            Answer::Changed(vec![bounded("search", json!(500))], sq(900)),
            "the bot quotes 900 atoms, above the 500 atoms at most the tool was listed at",
        )
        .listed_first(),
        Case::refused(
            "a bound on a fixed-price tool",
            vec![tool(
                "search",
                json!({"brmcp/priceAtoms": 10, "brmcp/priceMaxAtoms": 20}),
            )],
            "search",
            Answer::Quote(sq(10)),
            "a price bound on a tool not priced \"dynamic\"",
        )
        .listed_first(),
        Case::refused(
            "a least above the most",
            vec![ranged("search", 600, 500)],
            "search",
            Answer::Quote(sq(550)),
            "brmcp/priceMinAtoms is above brmcp/priceMaxAtoms",
        )
        .listed_first(),
        Case::refused(
            "a malformed bound: a string",
            vec![bounded("search", json!("500"))],
            "search",
            Answer::Quote(sq(400)),
            "brmcp/priceMaxAtoms is not a whole number of atoms",
        )
        .listed_first(),
        Case::refused(
            "a malformed bound: negative",
            vec![bounded("search", json!(-1))],
            "search",
            Answer::Quote(sq(400)),
            "brmcp/priceMaxAtoms is not a whole number of atoms",
        )
        .listed_first(),
        Case::refused(
            "a malformed bound: a fraction",
            vec![bounded("search", json!(500.5))],
            "search",
            Answer::Quote(sq(400)),
            "brmcp/priceMaxAtoms is not a whole number of atoms",
        )
        .listed_first(),
        Case::refused(
            "a malformed bound: above i64",
            vec![bounded("search", json!(9_223_372_036_854_775_808u64))],
            "search",
            Answer::Quote(sq(400)),
            "brmcp/priceMaxAtoms is not a whole number of atoms",
        )
        .listed_first(),
    ];
    for case in &mut cases {
        if case.name == "malformed shortfall" {
            case.name = "malformed shortfall (5.0, \"5\", -5, 2^63)";
        }
    }
    cases
}
