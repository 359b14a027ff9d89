//! Tools as the operator registers them: a name, a description, an input type (its JSON
//! schema derived with schemars), a [`Price`], and a handler that receives the caller's
//! uid ([`CallContext`]) and the typed arguments.
//!
//! `tools/list` advertises the price in the tool's `_meta` (WIRE.md §10):
//! [`PRICE_META`] with the price in atoms for a free (0) or fixed-price tool,
//! [`PRICING_META`] = [`DYNAMIC_PRICING`] for a dynamically priced one, with its
//! bounds (`brmcp/priceMaxAtoms`, `brmcp/priceMinAtoms`) when it has them.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use brmcp_adapters::PeerId;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{Json, Peer};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::call_key::CallKey;

pub use brmcp_adapters::protocol::{DYNAMIC_PRICING, PRICE_META, PRICING_META};

/// A price function: the price in atoms of one call by a caller with these arguments,
/// or why the call cannot be priced (the message becomes the tool error).
pub type PriceFn<In> = Arc<dyn Fn(&PeerId, &In) -> Result<u64, String> + Send + Sync>;

/// A price answered later (say, asked of another server), or why the call cannot be
/// priced (the message becomes the tool error).
pub type PriceFuture = Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

/// A price function that answers later: it takes what it needs of the arguments.
pub type AskPriceFn<In> = Arc<dyn Fn(&PeerId, &In) -> PriceFuture + Send + Sync>;

pub use brmcp_adapters::protocol::PriceBounds;

/// What one call of a tool costs.
pub enum Price<In> {
    /// Nothing; listed with `brmcp/priceAtoms: 0`.
    Free,
    /// This many atoms per call; listed with `brmcp/priceAtoms`. 0 is free.
    Fixed(u64),
    /// A function of the caller and the arguments; listed with
    /// `brmcp/pricing: "dynamic"`. It runs after the rate limit and before the debit,
    /// on the session's task: keep it quick. A price of 0 makes the call free.
    Dynamic(PriceFn<In>),
    /// A [`Dynamic`](Self::Dynamic) price within bounds, listed with them
    /// (`brmcp/priceMaxAtoms`, `brmcp/priceMinAtoms`): a price outside them refuses
    /// the call before anything is charged, so no caller is ever quoted above the
    /// bound it was shown.
    Bounded(PriceBounds, PriceFn<In>),
    /// A price asked for when the call comes (the future runs after the rate limit and
    /// before the debit), within bounds, listed and enforced as
    /// [`Bounded`](Self::Bounded).
    Asked(PriceBounds, AskPriceFn<In>),
}

impl<In> Price<In> {
    /// A dynamic price from a closure.
    pub fn dynamic(
        f: impl Fn(&PeerId, &In) -> Result<u64, String> + Send + Sync + 'static,
    ) -> Self {
        Self::Dynamic(Arc::new(f))
    }

    /// A dynamic price from a closure, within `bounds`.
    pub fn bounded(
        bounds: PriceBounds,
        f: impl Fn(&PeerId, &In) -> Result<u64, String> + Send + Sync + 'static,
    ) -> Self {
        Self::Bounded(bounds, Arc::new(f))
    }

    /// The price of one call, checked against the listed bounds.
    fn of(&self, caller: &PeerId, args: &In) -> PriceFuture {
        let (bounds, price) = match self {
            Self::Free => (PriceBounds::NONE, Ok(0)),
            Self::Fixed(atoms) => (PriceBounds::NONE, Ok(*atoms)),
            Self::Dynamic(f) => (PriceBounds::NONE, f(caller, args)),
            Self::Bounded(bounds, f) => (*bounds, f(caller, args)),
            Self::Asked(bounds, f) => {
                let (bounds, price) = (*bounds, f(caller, args));
                return Box::pin(async move { within(&bounds, price.await?) });
            }
        };
        Box::pin(std::future::ready(price.and_then(|p| within(&bounds, p))))
    }

    fn meta(&self) -> MetaObject {
        let mut meta = MetaObject::default();
        match self {
            Self::Free => meta.insert(PRICE_META.into(), 0.into()),
            Self::Fixed(atoms) => meta.insert(PRICE_META.into(), (*atoms).into()),
            Self::Dynamic(_) | Self::Bounded(..) | Self::Asked(..) => {
                meta.insert(PRICING_META.into(), DYNAMIC_PRICING.into())
            }
        };
        if let Self::Bounded(bounds, _) | Self::Asked(bounds, _) = self {
            bounds.write_meta(&mut meta.0);
        }
        meta
    }
}

/// `atoms` when `bounds` admit it, else the refusal the caller reads: nothing was
/// charged.
fn within(bounds: &PriceBounds, atoms: u64) -> Result<u64, String> {
    if bounds.admits(atoms) {
        Ok(atoms)
    } else {
        Err(format!(
            "the price of this call, {atoms} atoms, is outside the listed bound ({bounds}); nothing was charged"
        ))
    }
}

impl<In> Clone for Price<In> {
    fn clone(&self) -> Self {
        match self {
            Self::Free => Self::Free,
            Self::Fixed(atoms) => Self::Fixed(*atoms),
            Self::Dynamic(f) => Self::Dynamic(f.clone()),
            Self::Bounded(bounds, f) => Self::Bounded(*bounds, f.clone()),
            Self::Asked(bounds, f) => Self::Asked(*bounds, f.clone()),
        }
    }
}

impl<In> fmt::Debug for Price<In> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Free => f.write_str("Free"),
            Self::Fixed(atoms) => f.debug_tuple("Fixed").field(atoms).finish(),
            Self::Dynamic(_) => f.write_str("Dynamic(..)"),
            Self::Bounded(bounds, _) => write!(f, "Bounded({bounds}, ..)"),
            Self::Asked(bounds, _) => write!(f, "Asked({bounds}, ..)"),
        }
    }
}

/// A tool handler's failure: the call's answer is a tool error (`isError: true`) with
/// this message as its only text content, and its price is refunded.
///
/// Any error converts with `?`. Like `anyhow::Error`, it does not implement
/// [`std::error::Error`] itself, which is what lets every error convert into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
}

impl ToolError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(e: E) -> Self {
        Self::new(e.to_string())
    }
}

/// What a handler may return on success.
pub trait IntoToolResult {
    /// The tool result.
    ///
    /// # Errors
    ///
    /// When the value cannot be turned into a result (say, it does not serialize): the
    /// call then fails as if the handler had.
    fn into_tool_result(self) -> Result<CallToolResult, ToolError>;
}

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(self)
    }
}

/// One text content.
impl IntoToolResult for String {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::success(vec![ContentBlock::text(self)]))
    }
}

/// One text content.
impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        self.to_owned().into_tool_result()
    }
}

/// Structured content plus the same JSON as text, as the Go harness answers.
impl IntoToolResult for serde_json::Value {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::structured(self))
    }
}

/// Structured content plus the same JSON as text, as the Go harness answers.
impl<T: Serialize> IntoToolResult for Json<T> {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        serde_json::to_value(self.0)
            .map(CallToolResult::structured)
            .map_err(|e| ToolError::new(format!("result does not serialize: {e}")))
    }
}

/// The input type of a tool without arguments: the schema of an empty object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct NoArgs {}

/// What a handler knows about its call besides the arguments.
#[derive(Debug)]
pub struct CallContext {
    pub(crate) caller: PeerId,
    pub(crate) tool: Arc<str>,
    pub(crate) price_atoms: u64,
    pub(crate) call_key: Option<CallKey>,
    pub(crate) request: RequestContext<RoleServer>,
}

impl CallContext {
    /// The caller: the Bison Relay uid of the PM sender (never anything the call says).
    pub fn caller(&self) -> PeerId {
        self.caller
    }

    /// The tool called.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The atoms debited for this call (0 for a free call); refunded if the handler
    /// fails.
    pub fn price_atoms(&self) -> u64 {
        self.price_atoms
    }

    /// The call's key, if the caller sent one.
    pub fn call_key(&self) -> Option<&CallKey> {
        self.call_key.as_ref()
    }

    /// The session's rmcp peer, to send progress notifications with.
    pub fn peer(&self) -> &Peer<RoleServer> {
        &self.request.peer
    }

    /// rmcp's context of the `tools/call` request: its `_meta` (progress token), its
    /// cancellation token (`ct`), its extensions.
    ///
    /// A cancelled request does not stop the handler: the harness records whatever it
    /// returns, so a retry with the same key replays it. A handler may watch `ct` and
    /// stop early.
    pub fn request(&self) -> &RequestContext<RoleServer> {
        &self.request
    }
}

/// A boxed handler future.
pub(crate) type ToolFuture =
    Pin<Box<dyn Future<Output = Result<CallToolResult, ToolError>> + Send>>;

/// One call with decoded arguments, ready to be priced and run.
pub(crate) trait PreparedCall: Send {
    fn price(&self, caller: &PeerId) -> PriceFuture;
    /// Whether pricing asks someone else (a companion tool): its refusal then keeps
    /// the call's rate-limit ticket, so refused calls cannot ask without bound.
    fn price_is_asked(&self) -> bool;
    fn run(self: Box<Self>, ctx: CallContext) -> ToolFuture;
}

/// A tool with its argument type erased.
trait ErasedTool: Send + Sync {
    fn prepare(&self, args: Option<JsonObject>) -> Result<Box<dyn PreparedCall>, String>;
}

/// Says whether a tool can be called now, or why not (the message becomes the tool
/// error).
pub type Availability = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

struct TypedTool<In, F> {
    price: Price<In>,
    handler: Arc<F>,
}

struct TypedCall<In, F> {
    args: In,
    price: Price<In>,
    handler: Arc<F>,
}

impl<In, Out, F, Fut> ErasedTool for TypedTool<In, F>
where
    In: DeserializeOwned + Send + Sync + 'static,
    Out: IntoToolResult + 'static,
    F: Fn(CallContext, In) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
{
    fn prepare(&self, args: Option<JsonObject>) -> Result<Box<dyn PreparedCall>, String> {
        let args: In = serde_json::from_value(serde_json::Value::Object(args.unwrap_or_default()))
            .map_err(|e| format!("invalid arguments: {e}"))?;
        Ok(Box::new(TypedCall {
            args,
            price: self.price.clone(),
            handler: self.handler.clone(),
        }))
    }
}

impl<In, Out, F, Fut> PreparedCall for TypedCall<In, F>
where
    In: Send + Sync + 'static,
    Out: IntoToolResult + 'static,
    F: Fn(CallContext, In) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
{
    fn price(&self, caller: &PeerId) -> PriceFuture {
        self.price.of(caller, &self.args)
    }

    fn price_is_asked(&self) -> bool {
        matches!(self.price, Price::Asked(..))
    }

    fn run(self: Box<Self>, ctx: CallContext) -> ToolFuture {
        let fut = (self.handler)(ctx, self.args);
        Box::pin(async move { fut.await.and_then(IntoToolResult::into_tool_result) })
    }
}

/// A tool as registered with the harness.
pub struct ToolSpec {
    pub(crate) tool: Tool,
    pub(crate) schema_error: Option<String>,
    erased: Arc<dyn ErasedTool>,
    available: Option<Availability>,
}

impl fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpec")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl ToolSpec {
    /// A tool named `name`, whose arguments are an `In` (its JSON schema is the listed
    /// `inputSchema`), costing `price`, answered by `handler`.
    ///
    /// `In`'s schema must be an object; if it is not, building the harness fails.
    pub fn new<In, Out, F, Fut>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        price: Price<In>,
        handler: F,
    ) -> Self
    where
        In: DeserializeOwned + JsonSchema + Send + Sync + 'static,
        Out: IntoToolResult + 'static,
        F: Fn(CallContext, In) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
    {
        let (schema, schema_error) = match rmcp::handler::server::tool::schema_for_input::<In>() {
            Ok(schema) => (schema, None),
            Err(e) => (Arc::new(JsonObject::new()), Some(e)),
        };
        let tool = Tool::new(name, description, schema).with_meta(price.meta());
        Self {
            tool,
            schema_error,
            erased: Arc::new(TypedTool {
                price,
                handler: Arc::new(handler),
            }),
            available: None,
        }
    }

    /// A tool whose definition (name, description, schemas, annotations) is given as it
    /// is, say mirrored from another MCP server, with raw JSON-object arguments. The
    /// price `_meta` keys replace any the definition carries; its other `_meta` stays.
    /// The schema is not checked: the handler sees whatever object the caller sent.
    pub fn from_definition<Out, F, Fut>(
        mut tool: Tool,
        price: Price<JsonObject>,
        handler: F,
    ) -> Self
    where
        Out: IntoToolResult + 'static,
        F: Fn(CallContext, JsonObject) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
    {
        let mut meta = tool.meta.take().unwrap_or_default();
        meta.remove(PRICE_META);
        meta.remove(PRICING_META);
        PriceBounds::NONE.write_meta(&mut meta.0);
        meta.0.extend(price.meta().0);
        Self {
            tool: tool.with_meta(meta),
            schema_error: None,
            erased: Arc::new(TypedTool {
                price,
                handler: Arc::new(handler),
            }),
            available: None,
        }
    }

    /// Refuses calls while `check` says the tool is unavailable: the refusal comes
    /// before the rate limit and the price, so nothing is charged.
    #[must_use]
    pub fn when_available(
        mut self,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.available = Some(Arc::new(check));
        self
    }

    /// A free tool.
    pub fn free<In, Out, F, Fut>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        handler: F,
    ) -> Self
    where
        In: DeserializeOwned + JsonSchema + Send + Sync + 'static,
        Out: IntoToolResult + 'static,
        F: Fn(CallContext, In) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
    {
        Self::new(name, description, Price::Free, handler)
    }

    /// A tool costing `atoms` per call.
    pub fn fixed<In, Out, F, Fut>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        atoms: u64,
        handler: F,
    ) -> Self
    where
        In: DeserializeOwned + JsonSchema + Send + Sync + 'static,
        Out: IntoToolResult + 'static,
        F: Fn(CallContext, In) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, ToolError>> + Send + 'static,
    {
        Self::new(name, description, Price::Fixed(atoms), handler)
    }

    /// Sets the human-readable title.
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.tool = self.tool.with_title(title);
        self
    }

    /// Sets the annotations (hints to clients).
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.tool = self.tool.with_annotations(annotations);
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// The tool as `tools/list` shows it, price `_meta` included.
    pub fn definition(&self) -> &Tool {
        &self.tool
    }

    pub(crate) fn prepare(
        &self,
        args: Option<JsonObject>,
    ) -> Result<Box<dyn PreparedCall>, String> {
        if let Some(check) = &self.available {
            check()?;
        }
        self.erased.prepare(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    struct Args {
        #[allow(dead_code)]
        n: u64,
    }

    async fn ok(_: CallContext, _: Args) -> Result<String, ToolError> {
        Ok(String::new())
    }

    /// The answer of a price that is known at once.
    fn ready(mut price: PriceFuture) -> Result<u64, String> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match price.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => panic!("a price known at once is pending"),
        }
    }

    #[test]
    fn a_bounded_price_is_listed_with_its_bound_and_refused_outside_it() {
        let bounds = PriceBounds::new(5, Some(100)).unwrap();
        let spec = ToolSpec::new("c", "", Price::bounded(bounds, |_, a: &Args| Ok(a.n)), ok);
        assert_eq!(
            serde_json::to_value(&spec.definition().meta).unwrap(),
            serde_json::json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 5, "brmcp/priceMaxAtoms": 100})
        );
        let price = |n: u64| {
            let call = spec
                .prepare(serde_json::json!({ "n": n }).as_object().cloned())
                .unwrap();
            ready(call.price(&PeerId::from_bytes([0; 32])))
        };
        assert_eq!(price(100), Ok(100));
        assert_eq!(price(5), Ok(5));
        assert_eq!(
            price(101).unwrap_err(),
            "the price of this call, 101 atoms, is outside the listed bound (5 to 100 atoms); nothing was charged"
        );
        assert!(price(4).is_err());
        assert!(
            price(0).is_err(),
            "0 is below a least of 5: refused, not free"
        );
    }

    #[test]
    fn list_meta_carries_the_price() {
        let free = ToolSpec::free("a", "", ok);
        let fixed = ToolSpec::fixed("b", "", 500, ok);
        let dynamic = ToolSpec::new("c", "", Price::dynamic(|_, a: &Args| Ok(a.n)), ok);
        let meta = |t: &ToolSpec| serde_json::to_value(&t.definition().meta).unwrap();
        assert_eq!(meta(&free), serde_json::json!({"brmcp/priceAtoms": 0}));
        assert_eq!(meta(&fixed), serde_json::json!({"brmcp/priceAtoms": 500}));
        assert_eq!(
            meta(&dynamic),
            serde_json::json!({"brmcp/pricing": "dynamic"})
        );
        assert_eq!(
            fixed.definition().input_schema.get("type"),
            Some(&serde_json::json!("object"))
        );
        assert!(fixed.schema_error.is_none());
    }

    #[test]
    fn a_given_definition_keeps_its_schema_and_gets_our_price_only() {
        let schema: JsonObject = serde_json::from_value(serde_json::json!({
            "type": "object", "properties": {"q": {"type": "string"}}
        }))
        .unwrap();
        let mut meta = MetaObject::default();
        // An upstream claiming its own price: replaced, never trusted.
        meta.insert(PRICE_META.into(), 0.into());
        meta.insert(PRICING_META.into(), DYNAMIC_PRICING.into());
        meta.insert("brmcp/priceMaxAtoms".into(), 1.into());
        meta.insert("x-upstream".into(), "kept".into());
        let tool = Tool::new("t", "d", Arc::new(schema.clone())).with_meta(meta);
        let spec =
            ToolSpec::from_definition(tool, Price::Fixed(700), |_, args: JsonObject| async move {
                Ok(serde_json::Value::Object(args))
            });
        assert_eq!(
            serde_json::to_value(&spec.definition().meta).unwrap(),
            serde_json::json!({"brmcp/priceAtoms": 700, "x-upstream": "kept"})
        );
        assert_eq!(*spec.definition().input_schema, schema);
        let call = spec
            .prepare(serde_json::json!({"q": 1}).as_object().cloned())
            .unwrap();
        assert_eq!(ready(call.price(&PeerId::from_bytes([0; 32]))), Ok(700));
    }

    #[test]
    fn an_unavailable_tool_is_refused_before_pricing() {
        let spec = ToolSpec::fixed("b", "", 500, ok).when_available(|| Err("down".into()));
        let err = spec
            .prepare(serde_json::json!({"n": 1}).as_object().cloned())
            .err()
            .unwrap();
        assert_eq!(err, "down");
    }

    #[test]
    fn non_object_inputs_are_reported() {
        async fn num(_: CallContext, _: u32) -> Result<String, ToolError> {
            Ok(String::new())
        }
        assert!(ToolSpec::free("n", "", num).schema_error.is_some());
    }

    #[test]
    fn arguments_decode_and_price() {
        let spec = ToolSpec::new("c", "", Price::dynamic(|_, a: &Args| Ok(a.n * 2)), ok);
        let args = serde_json::json!({"n": 21});
        let call = spec.prepare(args.as_object().cloned()).unwrap();
        assert_eq!(ready(call.price(&PeerId::from_bytes([0; 32]))), Ok(42));
        let err = spec
            .prepare(serde_json::json!({"n": "x"}).as_object().cloned())
            .err()
            .unwrap();
        assert!(err.starts_with("invalid arguments: "), "{err}");
        let empty = ToolSpec::free("e", "", |_, _: NoArgs| async { Ok("hi") });
        assert!(empty.prepare(None).is_ok());
    }
}
