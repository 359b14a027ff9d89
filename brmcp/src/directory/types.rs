//! The directory's JSON shapes, with the Go implementation's field names, order and
//! omitted zero values: tool inputs and outputs, and the stored entry model.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::server::schemars::JsonSchema;

/// The longest provider description, in bytes (the Go check counts bytes).
pub const MAX_DESCRIPTION_LEN: usize = 1024;

/// The most tags one registration carries (counted before normalisation).
pub const MAX_TAGS: usize = 16;

/// The longest raw tag, in bytes.
pub const MAX_TAG_LEN: usize = 32;

pub(crate) fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The tool call a provider nominates as its verification test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct TestSpec {
    /// The provider's tool the directory calls.
    pub tool: String,
    /// The tool's arguments, sent verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// The most the directory may spend on the test, in atoms.
    #[serde(rename = "maxAtoms")]
    pub max_atoms: i64,
}

/// The input of `register`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct RegisterIn {
    /// What the provider offers (at most 1024 bytes).
    pub description: String,
    /// Up to 16 tags of 1 to 32 bytes.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// The paid call the directory makes to verify the provider.
    pub test: TestSpec,
}

/// Why a registration is refused: the Go texts, in its check order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError {
    /// An empty description.
    NoDescription,
    /// Over [`MAX_DESCRIPTION_LEN`] bytes.
    LongDescription,
    /// Over [`MAX_TAGS`] tags.
    TooManyTags,
    /// A tag outside 1..=[`MAX_TAG_LEN`] bytes.
    BadTag,
    /// An empty `test.tool`.
    NoTestTool,
    /// `test.maxAtoms` ≤ 0.
    NoBudget,
    /// `test.maxAtoms` above the policy's ceiling.
    OverCeiling(i64),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoDescription => f.write_str("description is required"),
            Self::LongDescription => {
                write!(f, "description exceeds {MAX_DESCRIPTION_LEN} characters")
            }
            Self::TooManyTags => write!(f, "at most {MAX_TAGS} tags"),
            Self::BadTag => write!(f, "tags must be 1-{MAX_TAG_LEN} characters"),
            Self::NoTestTool => f.write_str("test.tool is required"),
            Self::NoBudget => f.write_str("test.maxAtoms must be positive"),
            Self::OverCeiling(n) => {
                write!(f, "test.maxAtoms exceeds the directory's {n} atom ceiling")
            }
        }
    }
}

impl std::error::Error for RegisterError {}

impl RegisterIn {
    /// Checks the registration against the rules and the `ceiling` on `test.maxAtoms`.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn validate(&self, ceiling: i64) -> Result<(), RegisterError> {
        if self.description.trim().is_empty() {
            return Err(RegisterError::NoDescription);
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            return Err(RegisterError::LongDescription);
        }
        let tags = self.tags.as_deref().unwrap_or_default();
        if tags.len() > MAX_TAGS {
            return Err(RegisterError::TooManyTags);
        }
        if tags.iter().any(|t| t.is_empty() || t.len() > MAX_TAG_LEN) {
            return Err(RegisterError::BadTag);
        }
        if self.test.tool.trim().is_empty() {
            return Err(RegisterError::NoTestTool);
        }
        if self.test.max_atoms <= 0 {
            return Err(RegisterError::NoBudget);
        }
        if self.test.max_atoms > ceiling {
            return Err(RegisterError::OverCeiling(ceiling));
        }
        Ok(())
    }
}

/// Trims, lowercases, drops empty tags and duplicates, keeping the first occurrence
/// and the input order.
pub fn normalize_tags(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags {
        let tag = tag.trim().to_lowercase();
        if !tag.is_empty() && !out.contains(&tag) {
            out.push(tag);
        }
    }
    out
}

/// Where a provider is: the `state` of [`StatusOut`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Nothing known.
    None,
    /// Waiting for the fee and the test budget.
    AwaitingFunding,
    /// The catalog is being read.
    Crawling,
    /// The paid test is running.
    Testing,
    /// Waiting for the operator (or parked after a failure).
    PendingReview,
    /// Listed.
    Listed,
    /// Rejected or flagged.
    Rejected,
}

/// The output of `register`, `my_status`, `approve`, `reject`, `run_verification`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusOut {
    /// Where the provider is.
    pub state: State,
    /// Fee plus test budget, while awaiting funding.
    #[serde(rename = "requiredAtoms", default, skip_serializing_if = "is_zero")]
    pub required_atoms: i64,
    /// The provider's balance here, while awaiting funding.
    #[serde(rename = "balanceAtoms", default, skip_serializing_if = "is_zero")]
    pub balance_atoms: i64,
    /// What is still missing, while awaiting funding.
    #[serde(rename = "shortfallAtoms", default, skip_serializing_if = "is_zero")]
    pub shortfall_atoms: i64,
    /// The registration's listing fee.
    #[serde(rename = "feeAtoms", default, skip_serializing_if = "is_zero")]
    pub fee_atoms: i64,
    /// The registration's test budget.
    #[serde(rename = "testBudgetAtoms", default, skip_serializing_if = "is_zero")]
    pub test_budget_atoms: i64,
    /// When the listing expires.
    #[serde(rename = "expiresAt", default, skip_serializing_if = "is_zero")]
    pub expires_at: i64,
    /// A test error, a flag, or a remark.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl StatusOut {
    /// Just a state.
    pub fn of(state: State) -> Self {
        Self {
            state,
            required_atoms: 0,
            balance_atoms: 0,
            shortfall_atoms: 0,
            fee_atoms: 0,
            test_budget_atoms: 0,
            expires_at: 0,
            note: String::new(),
        }
    }
}

/// The result of a test: `testOutcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The paid call returned a non-error result.
    Ok,
    /// The crawl or the call failed.
    Failed,
}

/// A registration in progress (the stored `reg`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// One of the four stored states.
    pub state: State,
    /// As registered (untrimmed).
    pub description: String,
    /// Normalised tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The nominated test.
    pub test: TestSpec,
    /// The fee frozen at registration.
    #[serde(rename = "feeAtoms")]
    pub fee_atoms: i64,
    /// The test budget (`test.maxAtoms`).
    #[serde(rename = "budgetAtoms")]
    pub budget_atoms: i64,
    /// The test call's key, persisted before any payment.
    #[serde(rename = "callKey", default, skip_serializing_if = "String::is_empty")]
    pub call_key: String,
    /// What the test has paid so far.
    #[serde(rename = "paidAtoms")]
    pub paid_atoms: i64,
    /// Whether a live listing existed at registration: a pass lists without review.
    pub renewal: bool,
    /// When it was registered.
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    /// The crawled `tools` array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<Value>,
    /// The test's result.
    #[serde(
        rename = "testOutcome",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub test_outcome: Option<Outcome>,
    /// Why the test failed.
    #[serde(rename = "testErr", default, skip_serializing_if = "String::is_empty")]
    pub test_err: String,
    /// The final test attempt's latency.
    #[serde(rename = "testLatencyMs", default, skip_serializing_if = "is_zero")]
    pub test_latency_ms: i64,
}

/// A live listing (the stored `live`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// As registered.
    pub description: String,
    /// Normalised tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The test that passed (not exposed).
    pub test: TestSpec,
    /// The crawled `tools` array.
    pub catalog: Value,
    /// When the catalog was last read (or the listing promoted).
    #[serde(rename = "catalogCheckedAt")]
    pub catalog_checked_at: i64,
    /// When a paid test last passed (at promotion).
    #[serde(rename = "lastVerifiedExecution")]
    pub last_verified_execution: i64,
    /// The passing test's latency.
    #[serde(rename = "testLatencyMs")]
    pub test_latency_ms: i64,
    /// When first approved.
    #[serde(rename = "approvedAt")]
    pub approved_at: i64,
    /// When last renewed.
    #[serde(rename = "renewedAt", default, skip_serializing_if = "is_zero")]
    pub renewed_at: i64,
    /// When it expires.
    #[serde(rename = "expiresAt")]
    pub expires_at: i64,
}

/// One provider's stored state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The live listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Listing>,
    /// The registration in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg: Option<Registration>,
    /// The operator's flag or rejection reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub flag: String,
}

impl Entry {
    /// Nothing left worth keeping.
    pub fn is_empty(&self) -> bool {
        self.live.is_none() && self.reg.is_none() && self.flag.is_empty()
    }
}

/// The output of `get_provider` and `recrawl`.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderOut {
    /// The provider.
    pub uid: String,
    /// As registered.
    pub description: String,
    /// Normalised tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The crawled `tools` array.
    pub catalog: Value,
    /// See [`Listing`].
    #[serde(rename = "catalogCheckedAt")]
    pub catalog_checked_at: i64,
    /// See [`Listing`].
    #[serde(rename = "lastVerifiedExecution")]
    pub last_verified_execution: i64,
    /// See [`Listing`].
    #[serde(rename = "testLatencyMs")]
    pub test_latency_ms: i64,
    /// See [`Listing`].
    #[serde(rename = "approvedAt")]
    pub approved_at: i64,
    /// See [`Listing`].
    #[serde(rename = "renewedAt", skip_serializing_if = "is_zero")]
    pub renewed_at: i64,
    /// See [`Listing`].
    #[serde(rename = "expiresAt")]
    pub expires_at: i64,
}

impl ProviderOut {
    /// The public view of `uid`'s listing.
    pub fn of(uid: &str, live: &Listing) -> Self {
        Self {
            uid: uid.to_owned(),
            description: live.description.clone(),
            tags: live.tags.clone(),
            catalog: live.catalog.clone(),
            catalog_checked_at: live.catalog_checked_at,
            last_verified_execution: live.last_verified_execution,
            test_latency_ms: live.test_latency_ms,
            approved_at: live.approved_at,
            renewed_at: live.renewed_at,
            expires_at: live.expires_at,
        }
    }
}

/// One entry of `pending_registrations`.
#[derive(Debug, Clone, Serialize)]
pub struct PendingOut {
    /// The provider.
    pub uid: String,
    /// The registration's state.
    pub state: State,
    /// As registered.
    pub description: String,
    /// Normalised tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The nominated test.
    pub test: TestSpec,
    /// Whether it renews a listing.
    pub renewal: bool,
    /// The test's result.
    #[serde(rename = "testOutcome", skip_serializing_if = "Option::is_none")]
    pub test_outcome: Option<Outcome>,
    /// Why it failed.
    #[serde(rename = "testErr", skip_serializing_if = "String::is_empty")]
    pub test_err: String,
    /// The frozen fee.
    #[serde(rename = "feeAtoms")]
    pub fee_atoms: i64,
    /// The test budget.
    #[serde(rename = "budgetAtoms")]
    pub budget_atoms: i64,
    /// Spent on the test so far.
    #[serde(rename = "paidAtoms")]
    pub paid_atoms: i64,
    /// When registered.
    #[serde(rename = "createdAt")]
    pub created_at: i64,
}

impl PendingOut {
    /// The operator's view of `uid`'s registration.
    pub fn of(uid: &str, reg: &Registration) -> Self {
        Self {
            uid: uid.to_owned(),
            state: reg.state,
            description: reg.description.clone(),
            tags: reg.tags.clone(),
            test: reg.test.clone(),
            renewal: reg.renewal,
            test_outcome: reg.test_outcome,
            test_err: reg.test_err.clone(),
            fee_atoms: reg.fee_atoms,
            budget_atoms: reg.budget_atoms,
            paid_atoms: reg.paid_atoms,
            created_at: reg.created_at,
        }
    }
}

/// The output of `stats`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StatsOut {
    /// Live listings.
    pub live: i64,
    /// Registrations not in `pending_review`.
    #[serde(rename = "inPipeline")]
    pub in_pipeline: i64,
    /// Registrations in `pending_review`.
    #[serde(rename = "pendingReview")]
    pub pending_review: i64,
    /// Federation leads.
    pub leads: i64,
    /// Curated peers.
    pub peers: i64,
    /// Launched test payments.
    #[serde(rename = "spendEntries")]
    pub spend_entries: i64,
    /// Their sum, in atoms.
    #[serde(rename = "spendAtoms")]
    pub spend_atoms: i64,
}

/// The input of the tools that take just a provider's uid.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct UidIn {
    /// The provider's Bison Relay uid (64 hex characters).
    pub uid: String,
}

/// The input of `reject`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct RejectIn {
    /// The provider.
    pub uid: String,
    /// Why; kept as the provider's flag when non-empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The input of `flag`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct FlagIn {
    /// The provider.
    pub uid: String,
    /// The note; empty clears the flag.
    pub note: String,
}

/// A tool input with no fields: any key is refused, and `null` arguments are accepted.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(json: Value) -> RegisterIn {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn tags_normalise_keeping_order() {
        let tags = ["Echo", "test", "echo", "  ", " Zed "].map(String::from);
        assert_eq!(normalize_tags(&tags), ["echo", "test", "zed"]);
    }

    #[test]
    fn validation_follows_the_check_order() {
        let ok = serde_json::json!({"description": "d", "test": {"tool": "t", "maxAtoms": 5}});
        assert_eq!(reg(ok.clone()).validate(10), Ok(()));
        let mut r = reg(ok.clone());
        r.description = " \n".into();
        r.test.tool = String::new();
        assert_eq!(r.validate(10), Err(RegisterError::NoDescription));
        let mut r = reg(ok.clone());
        r.description = "é".repeat(513);
        assert_eq!(r.validate(10), Err(RegisterError::LongDescription));
        let mut r = reg(ok.clone());
        r.tags = Some(vec![" ".into()]);
        assert_eq!(
            r.validate(10),
            Ok(()),
            "a blank tag passes and is dropped later"
        );
        r.tags = Some(vec!["x".repeat(33)]);
        assert_eq!(r.validate(10), Err(RegisterError::BadTag));
        r.tags = Some(vec!["a".into(); 17]);
        assert_eq!(r.validate(10), Err(RegisterError::TooManyTags));
        let mut r = reg(ok);
        r.test.max_atoms = 11;
        assert_eq!(
            r.validate(10).unwrap_err().to_string(),
            "test.maxAtoms exceeds the directory's 10 atom ceiling"
        );
    }

    #[test]
    fn status_leaves_zero_fields_out() {
        let mut s = StatusOut::of(State::AwaitingFunding);
        s.required_atoms = 3000;
        s.shortfall_atoms = 3000;
        s.fee_atoms = 1000;
        s.test_budget_atoms = 2000;
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"state":"awaiting_funding","requiredAtoms":3000,"shortfallAtoms":3000,"feeAtoms":1000,"testBudgetAtoms":2000}"#
        );
    }
}
