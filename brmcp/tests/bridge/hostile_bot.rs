//! A hostile bot with scripted answers: whatever it lists and quotes, the bridge pays
//! at most once per call, never more than min(listed price, quoted shortfall) nor the
//! caps, never for a free, unlisted or unpriced tool, and never on a malformed quote.
//! A dynamically priced tool's quote is paid only within the bound it was listed with
//! (the bound last listed to the agent, or a lower one the bot lists since); a
//! malformed bound, or a bound on a fixed-price tool, is a malformed listing. Each
//! refusal names the bot, the tool and the numbers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::Bridge;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::common::{PayMode, PayerState, TestPayer, autopay, base_config, connect, text};

mod cases;

use cases::cases;

/// What the bot answers to one `tools/call`.
#[derive(Clone)]
enum Answer {
    /// An `isError` result whose only text is this body.
    Quote(Value),
    /// The bot lists `tools` from now on, then answers `Quote(body)`.
    Relist(Vec<Tool>, Value),
    /// The bot lists `tools` from now on, tells the bridge its tools changed, waits
    /// until the bridge listed them again, then answers `Quote(body)`.
    Changed(Vec<Tool>, Value),
    /// The call runs.
    Ran,
}

/// How long the bot waits for the bridge to list its changed tools; it takes
/// milliseconds.
const RELIST_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

#[derive(Default)]
struct Script {
    tools: Mutex<Vec<Tool>>,
    answers: Mutex<VecDeque<Answer>>,
    calls: Mutex<usize>,
    lists: Mutex<usize>,
}

#[derive(Clone)]
struct HostileBot(Arc<Script>);

impl ServerHandler for HostileBot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.0.tools.lock().unwrap().clone();
        *self.0.lists.lock().unwrap() += 1;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        *self.0.calls.lock().unwrap() += 1;
        let answer = self.0.answers.lock().unwrap().pop_front();
        let body = match answer.unwrap_or(Answer::Ran) {
            Answer::Quote(body) => body,
            Answer::Relist(tools, body) => {
                *self.0.tools.lock().unwrap() = tools;
                body
            }
            Answer::Changed(tools, body) => {
                *self.0.tools.lock().unwrap() = tools;
                let lists = *self.0.lists.lock().unwrap();
                context.peer.notify_tool_list_changed().await.unwrap();
                let relisted = async {
                    while *self.0.lists.lock().unwrap() == lists {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                };
                tokio::time::timeout(RELIST_WITHIN, relisted)
                    .await
                    .expect("the bridge lists the changed tools");
                // The listing's answer reaches the bridge before the quote; give its
                // task the moment to keep it.
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                body
            }
            Answer::Ran => {
                return Ok(CallToolResult::success(vec![ContentBlock::text("ran")]).into());
            }
        };
        let text = match body {
            Value::String(raw) => raw,
            other => other.to_string(),
        };
        Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into())
    }
}

fn tool(name: &str, meta: Value) -> Tool {
    serde_json::from_value(json!({
        "name": name,
        "inputSchema": {"type": "object"},
        "_meta": meta,
    }))
    .unwrap()
}

/// A dynamically priced tool listed at most `max` atoms.
fn bounded(name: &str, max: Value) -> Tool {
    tool(
        name,
        json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": max}),
    )
}

/// A well-formed quote.
fn quote(tool: &str, price: Value, balance: Value, shortfall: Value) -> Value {
    json!({"error": "payment_required", "tool": tool, "priceAtoms": price,
           "balanceAtoms": balance, "shortfallAtoms": shortfall, "acceptedRails": ["tip"]})
}

/// Per-call and daily caps of every case.
const PER_CALL_CAP: u64 = 1000;
const PER_DAY_CAP: u64 = 100_000;

struct Case {
    name: &'static str,
    tools: Vec<Tool>,
    call: &'static str,
    answers: Vec<Answer>,
    /// The payments the bridge must make.
    paid: Vec<u64>,
    /// The listed price bound and the first quoted shortfall bound, for the invariant.
    bound: u64,
    /// What the refusal note must say, if the call ends refused.
    note: Option<&'static str>,
    /// Whether the agent lists the tools before it calls.
    list_first: bool,
}

struct Run {
    payments: Vec<u64>,
    text: String,
    calls: usize,
    bot: PeerId,
    /// What the agent listed, if it did.
    listed: Vec<Tool>,
}

async fn run(case: &Case) -> Run {
    let fabric = Fabric::new(11);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let script = Arc::new(Script::default());
    *script.tools.lock().unwrap() = case.tools.clone();
    *script.answers.lock().unwrap() = case.answers.iter().cloned().collect();
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = HostileBot(script.clone());
    bot_router.serve(move |_: &PeerId| handler.clone());
    let payer = PayerState::new(Arc::default(), bridge_id, PayMode::NeverCredit);
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config(dir.path());
    config.poll_attempts = 2;
    let bridge = Bridge::new(
        config,
        fabric.router(bridge_id, RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .unwrap();
    let mut settings = autopay(bot_id);
    settings.per_call_cap_atoms = PER_CALL_CAP;
    settings.per_day_cap_atoms = PER_DAY_CAP;
    bridge.apply_settings(settings).await.unwrap();
    let agent = connect(&bridge, bot_id, ()).await;
    let listed = if case.list_first {
        agent.list_all_tools().await.unwrap()
    } else {
        Vec::new()
    };
    let result = agent
        .call_tool(CallToolRequestParams::new(case.call))
        .await
        .unwrap();
    agent.cancel().await.unwrap();
    let payments: Vec<u64> = payer.payments.lock().unwrap().iter().map(|p| p.1).collect();
    let spent: u64 = bridge.spend_log().unwrap().1;
    assert_eq!(
        spent,
        payments.iter().sum::<u64>(),
        "{}: spend log",
        case.name
    );
    let calls = *script.calls.lock().unwrap();
    drop(bot_router);
    Run {
        payments,
        text: text(&result),
        calls,
        bot: bot_id,
        listed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_bot_is_paid_at_most_what_it_should() {
    for case in cases() {
        let run = run(&case).await;
        let total: u64 = run.payments.iter().sum();
        assert_eq!(run.payments, case.paid, "{}: {}", case.name, run.text);
        assert!(
            run.payments.len() <= 1 && total <= case.bound && total <= PER_CALL_CAP,
            "{}: paid {:?}",
            case.name,
            run.payments
        );
        match case.note {
            Some(note) => {
                let last = run.text.lines().last().unwrap_or_default().to_owned();
                assert!(
                    last.starts_with("brmcp-bridge: payment not made: ") && last.contains(note),
                    "{}: {last}",
                    case.name
                );
                if run.payments.is_empty() && !note.contains("cap") {
                    assert!(
                        last.contains(&run.bot.to_string())
                            && last.contains(&format!("{:?}", case.call)),
                        "{}: the note names the bot and the tool: {last}",
                        case.name
                    );
                }
            }
            None => assert!(
                !run.text.contains("payment not made"),
                "{}: {}",
                case.name,
                run.text
            ),
        }
        assert!(run.calls >= 1, "{}", case.name);
        // A well-formed bound is shown to the agent at the end of the description.
        if let Some(shown) = run.listed.iter().find(|t| t.name == "search")
            && let Some(max) = case.tools[0]
                .meta
                .as_ref()
                .and_then(|m| m.get("brmcp/priceMaxAtoms"))
                .and_then(Value::as_u64)
            && !case.name.contains("malformed")
            && !case.name.contains("fixed-price")
            && !case.name.contains("least above")
        {
            let description = shown.description.as_deref().unwrap_or_default();
            assert!(
                description.ends_with(&format!("{max} atoms)"))
                    || description.ends_with(&format!("{max} atoms.")),
                "{}: {description:?}",
                case.name
            );
        }
    }
}

/// In approval mode the user is asked about a dynamic quote with the bound it is
/// within: the parked payment (what the page and `approvals` show) carries both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_approving_a_dynamic_quote_sees_the_quote_and_the_bound() {
    let fabric = Fabric::new(13);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let script = Arc::new(Script::default());
    *script.tools.lock().unwrap() = vec![bounded("search", json!(5000))];
    *script.answers.lock().unwrap() = [Answer::Quote(quote(
        "search",
        json!(900),
        json!(300),
        json!(600),
    ))]
    .into_iter()
    .collect();
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = HostileBot(script.clone());
    bot_router.serve(move |_: &PeerId| handler.clone());
    let payer = PayerState::new(Arc::default(), bridge_id, PayMode::NeverCredit);
    let dir = tempfile::tempdir().unwrap();
    let bridge = Bridge::new(
        base_config(dir.path()),
        fabric.router(bridge_id, RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .unwrap();
    let mut settings = autopay(bot_id);
    settings.mode = brmcp::bridge::Mode::Approval;
    settings.approval_timeout_secs = 60;
    bridge.apply_settings(settings).await.unwrap();
    let mut parked = bridge.subscribe_payments();
    let agent = connect(&bridge, bot_id, ()).await;
    agent.list_all_tools().await.unwrap();
    let peer = agent.peer().clone();
    let call = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("search"))
            .await
            .unwrap()
    });
    let pending = tokio::time::timeout(std::time::Duration::from_secs(20), parked.recv())
        .await
        .expect("parked in time")
        .unwrap();
    assert_eq!(pending.atoms, 600, "the shortfall is what is paid");
    let quoted = pending.quoted.expect("a dynamic quote carries its bound");
    assert_eq!(
        quoted.to_string(),
        "quoted 900 atoms, listed at most 5000 atoms"
    );
    assert!(bridge.resolve_payment(&pending.id, false));
    let result = call.await.unwrap();
    assert_eq!(
        text(&result),
        "brmcp-bridge: payment not made: payment denied by the user"
    );
    assert!(payer.payments.lock().unwrap().is_empty());
    agent.cancel().await.unwrap();
    drop(bot_router);
}
