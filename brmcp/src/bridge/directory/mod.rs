//! A directory of providers served to the agent as local MCP tools.
//!
//! With directories in `mcpclient.json` ([`Settings::directories`](super::Settings)),
//! the bridge serves, for each, an MCP server of four tools at
//! `/mcp/directory/<name or uid>` (`/mcp/directory`: the first directory) and over
//! stdio (`brmcp bridge stdio --directory [NAME]`):
//!
//! - [`DIRECTORY_SEARCH`] forwards to the directory's `search`;
//! - [`DIRECTORY_GET_PROVIDER`] to `get_provider`;
//! - [`DIRECTORY_INTRODUCE`] to `introduce`;
//! - [`DIRECTORY_ADD_BOT`] looks the provider up (`get_provider`) and adds it to the
//!   user's bots once the user accepted an `elicitation/create` naming its uid, tools
//!   and prices. A client that cannot be asked gets a refusal naming the command that
//!   adds the bot; nothing is ever added unasked. The added bot is served at once.
//!
//! Beside the directory's answer, `directory_search` shows the bots that announced
//! themselves in posts the bridge received (`bridge::announcements`), marked as
//! announced, and `directory_add_bot` adds one no directory lists on the same consent,
//! its question naming it as announced (`announced.rs`).
//!
//! Every call to the directory goes through the bridge's link to the directory bot
//! and the same paid-call path as any bot's tools, so a priced `search` is paid under
//! the user's caps and approval mode. Answers are untrusted: bounded, their uids
//! checked (`answer.rs`), rendered as text showing uids and prices, with the JSON.

mod announced;
pub(crate) mod answer;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::IntoTransport;
use serde_json::{Value, json};

use brmcp_adapters::PeerId;

use super::announcements::Announcements;
use super::link::BotLink;
use super::proxy::ProxyServer;
use super::proxy::ask::{self, Answer};
use super::{Bridge, BridgeError, Inner};
pub use answer::{AnswerError, MAX_ANSWER_BYTES};
use answer::{MAX_REFUSAL_BYTES, Provider};
use tools::{AddArgs, SearchArgs, UidArgs};
pub use tools::{DIRECTORY_ADD_BOT, DIRECTORY_GET_PROVIDER, DIRECTORY_INTRODUCE, DIRECTORY_SEARCH};

/// The name of the directory tools' server in its `initialize` answer.
const SERVER_NAME: &str = "brmcp-directory";

/// A provider a directory lists, as `bots add --from-directory` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedBot {
    /// The provider's uid.
    pub uid: PeerId,
    /// Its description in the directory.
    pub description: String,
    /// Its tools with their prices as the directory reported them (`free`, `N atoms`,
    /// `dynamic price ...`).
    pub tools: Vec<(String, String)>,
}

impl From<&Provider> for ListedBot {
    fn from(p: &Provider) -> Self {
        Self {
            uid: p.uid,
            description: p.description.clone(),
            tools: p
                .tools
                .iter()
                .map(|t| (t.name.clone(), t.price.to_string()))
                .collect(),
        }
    }
}

/// The agent-facing server of one directory's tools: one per agent session.
#[derive(Clone)]
pub(crate) struct DirectoryServer {
    bridge: Arc<Inner>,
    link: Arc<BotLink>,
}

/// A tool answer that is an error for the agent.
fn failed(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A tool answer: `text` for the agent to read, then the JSON, also as structured
/// content.
fn answered(text: String, json: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![
        ContentBlock::text(text),
        ContentBlock::text(json.to_string()),
    ]);
    result.structured_content = Some(json);
    result
}

/// A 64-hex uid argument.
fn parse_uid(uid: &str) -> Result<PeerId, CallToolResult> {
    uid.parse()
        .map_err(|_| failed(format!("uid {uid:?} is not 64 hex characters")))
}

/// Tool arguments as `T`.
fn args<T: serde::de::DeserializeOwned>(params: &CallToolRequestParams) -> Result<T, ErrorData> {
    let value = Value::Object(params.arguments.clone().unwrap_or_default());
    serde_json::from_value(value).map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

impl DirectoryServer {
    pub(crate) fn new(bridge: Arc<Inner>, link: Arc<BotLink>) -> Self {
        Self { bridge, link }
    }

    /// The directory as the user named it, with its uid.
    fn label(&self) -> String {
        let uid = self.link.bot.to_string();
        match self
            .bridge
            .settings()
            .directories
            .iter()
            .find(|d| d.uid == uid)
            .and_then(|d| d.name.clone())
        {
            Some(name) => format!("{name} ({uid})"),
            None => uid,
        }
    }

    /// Calls the directory's `tool` through the bot proxy's paid-call path. A refusal
    /// (the directory's, or a payment not made) is the text the agent gets.
    async fn ask_directory(
        &self,
        tool: &'static str,
        args: Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<CallToolResult, CallToolResult>, ErrorData> {
        let Value::Object(args) = args else {
            return Err(ErrorData::internal_error("arguments not an object", None));
        };
        let params = CallToolRequestParams::new(tool).with_arguments(args);
        let proxy = ProxyServer::new(self.bridge.clone(), self.link.clone());
        let refused = |why: String| failed(format!("directory {}: {why}", self.label()));
        match proxy.call(params, ctx).await {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Ok(Err(refused(answer::refusal_text(&result))))
            }
            Ok(CallToolResponse::Complete(result)) => Ok(Ok(result)),
            Ok(_) => Ok(Err(refused(format!(
                "{tool}: an answer this bridge does not take"
            )))),
            Err(e) => Ok(Err(refused(format!(
                "{tool}: {}",
                answer::cut(&e.message, MAX_REFUSAL_BYTES)
            )))),
        }
    }

    fn unreadable(&self, tool: &str, e: AnswerError) -> CallToolResult {
        failed(format!("directory {}: {tool}: {e}", self.label()))
    }

    async fn search(&self, args: SearchArgs, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let announced = self.announced_hits(&args);
        let args = serde_json::to_value(args).unwrap_or_else(|_| json!({}));
        let result = match self.ask_directory("search", args, ctx).await {
            Ok(Ok(result)) => result,
            Ok(Err(refusal)) => return refusal,
            Err(e) => return failed(e.message.to_string()),
        };
        match answer::search(&result) {
            Ok(found) => {
                let mut text = format!("directory {}: {}", self.label(), found.text);
                let mut json = found.json;
                if let Some((more, hits)) = announced {
                    text.push('\n');
                    text.push_str(&more);
                    if let Value::Object(map) = &mut json {
                        map.insert("announced".into(), hits);
                    }
                }
                answered(text, json)
            }
            Err(e) => self.unreadable("search", e),
        }
    }

    /// The bridge's announcements that `args` find, as text and JSON; `None` without
    /// any (or with a file that does not read, which is logged).
    fn announced_hits(&self, args: &SearchArgs) -> Option<(String, Value)> {
        let store = self.announcements()?;
        let settings = self.bridge.settings();
        let hits = announced::matching(
            &store,
            args.query.as_deref(),
            args.tags.as_ref().is_some_and(|t| !t.is_empty()),
            args.max_price_atoms,
            now_secs(),
        );
        (!hits.is_empty()).then(|| announced::render(&hits, |uid| settings.allows(uid)))
    }

    /// The announcements of the bridge's data directory.
    fn announcements(&self) -> Option<Announcements> {
        Announcements::load(&self.bridge.config.data_dir, now_secs())
            .map_err(|e| tracing::warn!(error = %e, "announcements not read"))
            .ok()
    }

    /// The provider `uid` as the directory lists it.
    async fn provider(
        &self,
        uid: &PeerId,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Provider, CallToolResult> {
        let args = json!({"uid": uid.to_string()});
        let result = match self.ask_directory("get_provider", args, ctx).await {
            Ok(Ok(result)) => result,
            Ok(Err(refusal)) => return Err(refusal),
            Err(e) => return Err(failed(e.message.to_string())),
        };
        answer::provider(&result, uid).map_err(|e| self.unreadable("get_provider", e))
    }

    async fn get_provider(&self, uid: &str, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let uid = match parse_uid(uid) {
            Ok(uid) => uid,
            Err(refusal) => return refusal,
        };
        match self.provider(&uid, ctx).await {
            Ok(p) => {
                let text = format!("directory {} lists {}", self.label(), p.text());
                answered(text, p.json)
            }
            Err(refusal) => refusal,
        }
    }

    async fn introduce(&self, uid: &str, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let uid = match parse_uid(uid) {
            Ok(uid) => uid,
            Err(refusal) => return refusal,
        };
        let args = json!({"uid": uid.to_string()});
        let result = match self.ask_directory("introduce", args, ctx).await {
            Ok(Ok(result)) => result,
            Ok(Err(refusal)) => return refusal,
            Err(e) => return failed(e.message.to_string()),
        };
        match answer::introduce(&result, &uid) {
            Ok((text, json)) => answered(format!("directory {}: {text}", self.label()), json),
            Err(e) => self.unreadable("introduce", e),
        }
    }

    async fn add_bot(&self, args: AddArgs, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let uid = match parse_uid(&args.uid) {
            Ok(uid) => uid,
            Err(refusal) => return refusal,
        };
        let settings = self.bridge.settings();
        if settings.allows(&uid) {
            let json = json!({"uid": uid.to_string(), "added": false, "alreadyAllowed": true});
            return answered(format!("bot {uid} is already one of your bots"), json);
        }
        let name = args.name.unwrap_or_else(|| default_name(&uid));
        // Listed by the directory, or else announced by the bot itself in a post.
        let (tool_list, provider_json, question) = match self.provider(&uid, ctx).await {
            Ok(p) => {
                let question = format!(
                    "Add bot {uid} as {name:?}, listed by directory {}? Its tools, as the directory reports them: {}. \
                     Accept to add it, decline to refuse.",
                    self.label(),
                    p.tool_list()
                );
                (p.tool_list(), p.json, question)
            }
            Err(refusal) => {
                let store = self.announcements();
                let Some(hit) = store.as_ref().and_then(|s| s.of(&uid, now_secs())) else {
                    return refusal;
                };
                let a = &hit.announcement;
                let list = announced::tool_list(a);
                let question = format!(
                    "Add bot {uid} as {name:?}? No directory lists it: it announced itself in a \
                     Bison Relay post as {:?}, with these tools (its own words): {list}. Accept to \
                     add it, decline to refuse.",
                    a.name
                );
                let (_, json) = announced::render(&[hit], |_| false);
                (list, json[0].clone(), question)
            }
        };
        let Some(answer) = ask::confirm(ctx, question) else {
            let directory = match settings
                .directories
                .iter()
                .find(|d| d.uid == self.link.bot.to_string())
            {
                Some(d) => format!(" --directory {}", d.label()),
                None => String::new(),
            };
            return failed(format!(
                "bot {uid} not added: this MCP client cannot ask the user to confirm (it does not \
                 support elicitation). The user can add it with: brmcp bridge --datadir {} bots add \
                 --from-directory {uid}{directory} --name {name} (with the bridge stopped: the \
                 command uses the bridge's Bison Relay client, which serves one brmcp at a time)",
                self.bridge.config.data_dir.display()
            ));
        };
        // Bounded as a payment approval is, and given up when the agent cancels its
        // call: an answer after either adds nothing.
        let wait = settings.approval_timeout_secs;
        let answer = tokio::select! {
            biased;
            () = ctx.ct.cancelled() => {
                return failed(format!("bot {uid} not added: the call was cancelled"));
            }
            answer = tokio::time::timeout(Duration::from_secs(wait), answer) => match answer {
                Ok(answer) => answer,
                Err(_) => return failed(format!("bot {uid} not added: no answer within {wait}s")),
            },
        };
        if ctx.ct.is_cancelled() {
            return failed(format!("bot {uid} not added: the call was cancelled"));
        }
        match answer {
            Ok(Answer::Accept) => {}
            Ok(Answer::Decline) => {
                return failed(format!("bot {uid} not added: declined by the user"));
            }
            Ok(Answer::Cancel) => {
                return failed(format!("bot {uid} not added: cancelled by the user"));
            }
            Err(e) => return failed(format!("bot {uid} not added: the user was not asked: {e}")),
        }
        let bridge = Bridge {
            inner: self.bridge.clone(),
        };
        match bridge.add_bot(&name, uid).await {
            Ok(_) => {
                let json = json!({"uid": uid.to_string(), "name": name, "added": true, "provider": provider_json});
                let text = format!(
                    "added bot {uid} as {name:?}: its tools ({tool_list}) are served at /mcp/{uid} of this bridge"
                );
                answered(text, json)
            }
            Err(e) => failed(format!("bot {uid} not added: {e}")),
        }
    }
}

/// Now, in Unix seconds (announcements' age).
fn now_secs() -> u64 {
    use brmcp_adapters::Clock as _;
    u64::try_from(brmcp_adapters::SystemClock.now().secs()).unwrap_or(0)
}

/// The name a bot added without one gets: `dir-` and the uid's first 8 characters.
fn default_name(uid: &PeerId) -> String {
    let uid = uid.to_string();
    format!("dir-{}", &uid[..8])
}

impl ServerHandler for DirectoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Find Bison Relay bots in directory {} and add them to the user's bots. \
                 Results show each bot's uid and each tool's price in atoms.",
                self.label()
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list(&self.label())))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.bridge.settings().is_directory(&self.link.bot) {
            let gone = format!("directory {} is no longer in the settings", self.link.bot);
            return Ok(CallToolResponse::Complete(failed(gone)));
        }
        let result = match request.name.as_ref() {
            DIRECTORY_SEARCH => self.search(args(&request)?, &context).await,
            DIRECTORY_GET_PROVIDER => {
                let a: UidArgs = args(&request)?;
                self.get_provider(&a.uid, &context).await
            }
            DIRECTORY_INTRODUCE => {
                let a: UidArgs = args(&request)?;
                self.introduce(&a.uid, &context).await
            }
            DIRECTORY_ADD_BOT => self.add_bot(args(&request)?, &context).await,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(result))
    }
}

impl Bridge {
    /// The link of the directory `name` (its name or uid; `None`: the first one).
    fn directory(&self, name: Option<&str>) -> Result<Arc<BotLink>, BridgeError> {
        let unknown = || BridgeError::UnknownDirectory(name.unwrap_or("(default)").to_owned());
        let uid = self
            .settings()
            .directory(name)
            .and_then(super::DirectoryEntry::peer)
            .ok_or_else(unknown)?;
        self.inner.directory_link(&uid).ok_or_else(unknown)
    }

    /// Serves the tools of the directory `name` (its name or uid; `None`: the first
    /// configured) to one agent over `transport` until the agent leaves or the
    /// directory is removed from the settings.
    ///
    /// # Errors
    /// [`BridgeError::UnknownDirectory`], or [`BridgeError::Serve`] if the session
    /// could not start.
    pub async fn serve_directory<T, E, A>(
        &self,
        name: Option<&str>,
        transport: T,
    ) -> Result<(), BridgeError>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let link = self.directory(name)?;
        let server = DirectoryServer::new(self.inner.clone(), link.clone());
        super::stdio::serve_until_closed(server, &link, transport).await
    }

    /// Looks `uid` up in the directory `name` (`get_provider`, which is free) and adds
    /// it to the bots as `bot_name` (default `dir-` and its uid's first 8 characters):
    /// [`listed_in_directory`](Self::listed_in_directory) then
    /// [`add_listed`](Self::add_listed). A uid the directory does not list is refused
    /// and nothing changes.
    ///
    /// # Errors
    /// As [`listed_in_directory`](Self::listed_in_directory) and
    /// [`add_bot`](Self::add_bot).
    pub async fn add_from_directory(
        &self,
        name: Option<&str>,
        uid: PeerId,
        bot_name: Option<&str>,
    ) -> Result<ListedBot, BridgeError> {
        let listed = self.listed_in_directory(name, uid).await?;
        self.add_listed(&listed, bot_name).await?;
        Ok(listed)
    }

    /// The provider `uid` as the directory `name` (its name or uid; `None`: the first)
    /// lists it (`get_provider`, which is free), so a user can read it before
    /// [`add_listed`](Self::add_listed): what `brmcp bridge bots add --from-directory`
    /// shows.
    ///
    /// # Errors
    /// [`BridgeError::UnknownDirectory`], [`BridgeError::Unavailable`],
    /// [`BridgeError::Directory`] (the directory refused, or answered nonsense).
    pub async fn listed_in_directory(
        &self,
        name: Option<&str>,
        uid: PeerId,
    ) -> Result<ListedBot, BridgeError> {
        let link = self.directory(name)?;
        let conn = link.ensure().await?;
        let params = CallToolRequestParams::new("get_provider").with_arguments(
            json!({"uid": uid.to_string()})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let result = conn.peer().call_tool(params).await.map_err(|e| {
            let e = answer::cut(&e.to_string(), MAX_REFUSAL_BYTES);
            BridgeError::Directory(format!("get_provider: {e}"))
        })?;
        if result.is_error == Some(true) {
            return Err(BridgeError::Directory(format!(
                "bot {uid}: {}",
                answer::refusal_text(&result)
            )));
        }
        let provider = answer::provider(&result, &uid)
            .map_err(|e| BridgeError::Directory(format!("get_provider: {e}")))?;
        Ok(ListedBot::from(&provider))
    }

    /// Adds the provider `listed` to the bots as `bot_name` (default `dir-` and its
    /// uid's first 8 characters). Returns the settings as applied.
    ///
    /// # Errors
    /// As [`add_bot`](Self::add_bot).
    pub async fn add_listed(
        &self,
        listed: &ListedBot,
        bot_name: Option<&str>,
    ) -> Result<super::Settings, BridgeError> {
        let bot_name = bot_name.map_or_else(|| default_name(&listed.uid), str::to_owned);
        self.add_bot(&bot_name, listed.uid).await
    }
}

/// Serves the directory `name`'s tools over this process's stdin and stdout until the
/// agent closes stdin or the directory is removed.
///
/// # Errors
/// As [`Bridge::serve_directory`].
pub async fn serve_directory_stdio(bridge: &Bridge, name: Option<&str>) -> Result<(), BridgeError> {
    bridge.serve_directory(name, rmcp::transport::stdio()).await
}
