//! Where the clientrpc server is and how to talk to it: [`ClientRpcConfig`], and the
//! bisonbotkit `.conf` file it can be read from ([`BotConfig`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::ClientRpcError;

/// brclient's default clientrpc endpoint (`[clientrpc] jsonrpclisten`), with the `/ws`
/// path the websocket lives on.
pub const DEFAULT_URL: &str = "wss://127.0.0.1:7676/ws";

/// The server's bound on requests in flight per connection, open streams included.
///
/// The 17th request blocks the server's read loop, which then stops answering pings
/// and drops the connection (brclient's `clientrpc/jsonrpc` peer). The client never
/// exceeds it.
pub const MAX_IN_FLIGHT: usize = 16;

/// First reconnect delay after a failure: 1 s, as the Go client.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);

/// Reconnect delays double up to this: 30 s, as the Go client.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Interval between websocket pings: 30 s, the server's own interval.
const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// A ping unanswered this long drops the connection: 10 s, the server's own timeout.
const DEFAULT_PONG_TIMEOUT: Duration = Duration::from_secs(10);

/// Bound on TCP connect, TLS handshake and websocket upgrade together: 30 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default bound on one request, waiting for a connection included: 2 minutes.
///
/// brclient makes `TipUser` wait about a minute after it starts, before its tip
/// subsystem runs; a PM blocks while brclient is offline from the relay. Past the bound
/// the call fails with [`ClientRpcError::Timeout`] (the server may still carry it out).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Default time a tip waits for its terminal TipProgress event: 3 minutes.
///
/// The one-minute `TipUser` warm-up, an invoice round trip with the payee and an LN
/// payment. A tip still unsettled by then is reported as
/// [`TipOutcome::Unconfirmed`](super::TipOutcome::Unconfirmed): brclient retries it for
/// up to 72 h.
const DEFAULT_TIP_TIMEOUT: Duration = Duration::from_secs(180);

/// Default `maxAttempts` of a tip (invoice requests): 3, as bisonbotkit's `PayTip`.
const DEFAULT_TIP_MAX_ATTEMPTS: i32 = 3;

/// Largest websocket message accepted from the server: 128 MiB.
///
/// A relay on the larger size policy routes messages up to 18,874,370 bytes
/// (bisonrelay's `rpc.MaxMsgSizeV1`), and Go's JSON encoder can grow text up to six times (`\u003c`
/// for `<`), about 113 MB; the envelope adds little. A PM above the limit would fail
/// the connection at every redelivery and wedge the stream for good, so the limit
/// covers the largest PM any relay routes; the consumer then refuses (and
/// acknowledges) what it does not want.
const DEFAULT_MAX_MESSAGE_SIZE: usize = 128 << 20;

/// How long an item must have been received before an acknowledgement covers it:
/// 500 ms.
///
/// brclient sends tip events from several goroutines, so an item stored before
/// another can reach us after it; a cumulative acknowledgement of the later one would
/// clear the earlier one on the server before it arrived. Waiting this long after the
/// item an acknowledgement names lets such stragglers, delayed by scheduling only, come
/// in first. It only delays acknowledgements; redeliveries are deduplicated anyway.
pub const DEFAULT_ACK_SETTLE: Duration = Duration::from_millis(500);

/// How long a command about to exit waits for the acknowledgements of what it handled
/// ([`ClientRpcHost::flush_acks`](super::ClientRpcHost::flush_acks)): 5 s, room for
/// [`DEFAULT_ACK_SETTLE`] and a few acknowledgement round trips on a loaded machine.
/// Past it, what is left is replayed to the next consumer, which deduplicates it.
pub const ACK_FLUSH_WAIT: Duration = Duration::from_secs(5);

/// A certificate or key: a PEM file, or PEM text in memory.
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A PEM file, read at every connection attempt (so rotated files are picked up).
    File(PathBuf),
    /// PEM text.
    Pem(Vec<u8>),
}

impl PemSource {
    /// The PEM bytes.
    ///
    /// # Errors
    /// [`ClientRpcError::Io`] when the file cannot be read.
    pub fn load(&self) -> Result<Vec<u8>, ClientRpcError> {
        match self {
            Self::File(path) => std::fs::read(path).map_err(|e| ClientRpcError::io(path, e)),
            Self::Pem(pem) => Ok(pem.clone()),
        }
    }
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            // Keys are secrets; never print them.
            Self::Pem(pem) => write!(f, "Pem({} bytes)", pem.len()),
        }
    }
}

impl From<PathBuf> for PemSource {
    fn from(path: PathBuf) -> Self {
        Self::File(path)
    }
}

impl From<&Path> for PemSource {
    fn from(path: &Path) -> Self {
        Self::File(path.to_path_buf())
    }
}

/// HTTP basic auth credentials, sent as `Authorization: Basic base64(user:pass)`.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The user (`rpcuser`).
    pub user: String,
    /// The password (`rpcpass`).
    pub pass: String,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("user", &self.user)
            .field("pass", &"<redacted>")
            .finish()
    }
}

/// How to reach one brclient or brclientd over clientrpc.
///
/// The server's certificate is trusted when it is byte-for-byte one of the
/// certificates in [`server_cert`](Self::server_cert) (brclient's self-signed CA-flagged
/// `rpc.cert`, which stock verifiers refuse), or when it chains to one of them or to
/// [`ca_cert`](Self::ca_cert) for the URL's host (brclientd's CA-signed server leaf).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientRpcConfig {
    /// `wss://host:port/ws`. A URL with an empty path or `/` gets `/ws`: every other
    /// path is the server's POST handler, where the upgrade fails.
    pub url: String,
    /// The server's `rpc.cert` (brclient: `~/.brclient/rpc.cert`).
    pub server_cert: PemSource,
    /// Extra CA certificates a server certificate may chain to (brclientd's
    /// `rpc-ca.cert`).
    pub ca_cert: Option<PemSource>,
    /// The client certificate (`rpc-client.cert`); brclient requires one by default.
    pub client_cert: Option<PemSource>,
    /// The client certificate's key (`rpc-client.key`, PKCS#8 `PRIVATE KEY`).
    pub client_key: Option<PemSource>,
    /// Basic auth, for a brclient with `rpcauthmode` set.
    pub basic_auth: Option<BasicAuth>,
    /// Requests in flight per connection, open streams included; at most
    /// [`MAX_IN_FLIGHT`] (larger values are lowered to it).
    pub max_in_flight: usize,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// Interval between websocket pings.
    pub ping_interval: Duration,
    /// Time a ping may go unanswered before the connection is dropped.
    pub pong_timeout: Duration,
    /// Bound on connecting (TCP, TLS, websocket upgrade).
    pub connect_timeout: Duration,
    /// Bound on one request, waiting for a connection included; `None`: no bound.
    pub request_timeout: Option<Duration>,
    /// Time [`tip`](super::ClientRpcHost::tip) waits for the tip's terminal event.
    pub tip_timeout: Duration,
    /// `maxAttempts` sent with every tip.
    pub tip_max_attempts: i32,
    /// Largest websocket message accepted from the server.
    pub max_message_size: usize,
    /// How long an item must have been received before an acknowledgement covers it
    /// ([`DEFAULT_ACK_SETTLE`]).
    pub ack_settle: Duration,
}

impl ClientRpcConfig {
    /// A config for `url` trusting `server_cert`, with every other setting at its
    /// default and no client certificate.
    pub fn new(url: impl Into<String>, server_cert: impl Into<PemSource>) -> Self {
        Self {
            url: url.into(),
            server_cert: server_cert.into(),
            ca_cert: None,
            client_cert: None,
            client_key: None,
            basic_auth: None,
            max_in_flight: MAX_IN_FLIGHT,
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            ping_interval: DEFAULT_PING_INTERVAL,
            pong_timeout: DEFAULT_PONG_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            tip_timeout: DEFAULT_TIP_TIMEOUT,
            tip_max_attempts: DEFAULT_TIP_MAX_ATTEMPTS,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            ack_settle: DEFAULT_ACK_SETTLE,
        }
    }

    /// A config for the files brclient writes into `dir` (`~/.brclient`):
    /// `rpc.cert`, `rpc-client.cert` and `rpc-client.key`.
    pub fn brclient_dir(url: impl Into<String>, dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self::new(url, dir.join("rpc.cert"))
            .with_client_cert(dir.join("rpc-client.cert"), dir.join("rpc-client.key"))
    }

    /// The config a bisonbotkit `.conf` file describes.
    pub fn from_bot_config(bot: &BotConfig) -> Self {
        let mut config = Self::new(bot.url.clone(), bot.server_cert_path.clone());
        if let (Some(cert), Some(key)) = (&bot.client_cert_path, &bot.client_key_path) {
            config = config.with_client_cert(cert.clone(), key.clone());
        }
        if !bot.rpc_user.is_empty() || !bot.rpc_pass.is_empty() {
            config = config.with_basic_auth(bot.rpc_user.clone(), bot.rpc_pass.clone());
        }
        config
    }

    /// Sets the client certificate and its key.
    #[must_use]
    pub fn with_client_cert(
        mut self,
        cert: impl Into<PemSource>,
        key: impl Into<PemSource>,
    ) -> Self {
        self.client_cert = Some(cert.into());
        self.client_key = Some(key.into());
        self
    }

    /// Adds a CA the server's certificate may chain to (brclientd's `rpc-ca.cert`).
    #[must_use]
    pub fn with_ca_cert(mut self, ca: impl Into<PemSource>) -> Self {
        self.ca_cert = Some(ca.into());
        self
    }

    /// Sets basic auth credentials.
    #[must_use]
    pub fn with_basic_auth(mut self, user: impl Into<String>, pass: impl Into<String>) -> Self {
        self.basic_auth = Some(BasicAuth {
            user: user.into(),
            pass: pass.into(),
        });
        self
    }

    /// Sets the reconnect backoff: `initial`, doubling up to `max`.
    #[must_use]
    pub const fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }

    /// Sets the ping interval and the pong timeout.
    #[must_use]
    pub const fn with_ping(mut self, interval: Duration, timeout: Duration) -> Self {
        self.ping_interval = interval;
        self.pong_timeout = timeout;
        self
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.max_in_flight.clamp(1, MAX_IN_FLIGHT)
    }
}

/// A bisonbotkit bot config file (`brmcp-serve.conf` and the like), in the Go kit's
/// format, read strictly:
///
/// - `key=value` lines, split at the first `=`, key and value trimmed; blank lines and
///   lines starting with `#` are skipped;
/// - the keys are the kit's ([`KNOWN_KEYS`]); any other key, a line without `=`, a key
///   given twice, a `debug` level the kit does not know and a count that is not a
///   number are refused (the kit would ignore or silently replace them), naming the
///   line, the key and the reason, and [`load`](Self::load) the file;
/// - the URL is `brrpcurl` (newer kit) or `rpcurl` (older kit, README); `brrpcurl` wins
///   when both are present;
/// - paths starting with `~/` are taken relative to the home directory.
///
/// The kit's keys brmcp does not act on here (`debug`, `logfile`, `maxlogfiles`,
/// `maxbufferlines`, `brstatusurl`) are kept in [`extra`](Self::extra), as the kit's
/// `ExtraConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BotConfig {
    /// `datadir`, if present.
    pub datadir: Option<PathBuf>,
    /// `brrpcurl` or `rpcurl`.
    pub url: String,
    /// `servercertpath`.
    pub server_cert_path: PathBuf,
    /// `clientcertpath`.
    pub client_cert_path: Option<PathBuf>,
    /// `clientkeypath`.
    pub client_key_path: Option<PathBuf>,
    /// `rpcuser` (empty when absent).
    pub rpc_user: String,
    /// `rpcpass` (empty when absent).
    pub rpc_pass: String,
    /// Every other key.
    pub extra: BTreeMap<String, String>,
}

/// The keys of a bisonbotkit bot config file: the kit's own, and `brstatusurl`, the
/// extra key of the Go directory bot.
pub const KNOWN_KEYS: [&str; 13] = [
    "datadir",
    "brrpcurl",
    "rpcurl",
    "servercertpath",
    "clientcertpath",
    "clientkeypath",
    "rpcuser",
    "rpcpass",
    "debug",
    "logfile",
    "maxlogfiles",
    "maxbufferlines",
    "brstatusurl",
];

/// The kit's log levels (`debug=`).
const LOG_LEVELS: [&str; 7] = ["trace", "debug", "info", "warn", "error", "critical", "off"];

/// Why the value of `key` is refused, if it is.
fn check_value(key: &str, value: &str) -> Option<String> {
    match key {
        "debug"
            if !value.is_empty() && !LOG_LEVELS.contains(&value.to_ascii_lowercase().as_str()) =>
        {
            Some(format!("{value:?} is not one of {}", LOG_LEVELS.join(", ")))
        }
        "maxlogfiles" | "maxbufferlines" if !value.is_empty() && value.parse::<u32>().is_err() => {
            Some(format!("{value:?} is not a whole number"))
        }
        _ => None,
    }
}

impl BotConfig {
    /// Parses the text of a config file.
    ///
    /// # Errors
    /// [`ClientRpcError::Config`] for a refused line (see the type's docs), when
    /// neither `brrpcurl` nor `rpcurl` is set, when `servercertpath` is missing, or when
    /// only one of `clientcertpath` and `clientkeypath` is set.
    pub fn parse(text: &str) -> Result<Self, ClientRpcError> {
        let mut keys = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(ClientRpcError::Config(format!(
                    "line {n}: not key=value: {line:?}"
                )));
            };
            let (key, value) = (key.trim(), value.trim());
            let refuse = |why: String| ClientRpcError::Config(format!("line {n}: {key}: {why}"));
            if !KNOWN_KEYS.contains(&key) {
                return Err(refuse(format!(
                    "unknown key (known: {})",
                    KNOWN_KEYS.join(", ")
                )));
            }
            if let Some(why) = check_value(key, value) {
                return Err(refuse(why));
            }
            if keys.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(refuse("given twice".into()));
            }
        }
        let take = |keys: &mut BTreeMap<String, String>, key: &str| {
            keys.remove(key).filter(|v| !v.is_empty())
        };
        let brrpcurl = take(&mut keys, "brrpcurl");
        let rpcurl = take(&mut keys, "rpcurl");
        let url = brrpcurl
            .or(rpcurl)
            .ok_or_else(|| ClientRpcError::Config("brrpcurl is required".into()))?;
        let server_cert_path = take(&mut keys, "servercertpath")
            .map(|p| expand_home(&p))
            .ok_or_else(|| ClientRpcError::Config("servercertpath is required".into()))?;
        let client_cert_path = take(&mut keys, "clientcertpath").map(|p| expand_home(&p));
        let client_key_path = take(&mut keys, "clientkeypath").map(|p| expand_home(&p));
        if client_cert_path.is_some() != client_key_path.is_some() {
            return Err(ClientRpcError::Config(
                "clientcertpath and clientkeypath go together".into(),
            ));
        }
        Ok(Self {
            datadir: take(&mut keys, "datadir").map(|p| expand_home(&p)),
            url,
            server_cert_path,
            client_cert_path,
            client_key_path,
            rpc_user: keys.remove("rpcuser").unwrap_or_default(),
            rpc_pass: keys.remove("rpcpass").unwrap_or_default(),
            extra: keys,
        })
    }

    /// A config for the server at `url` whose certificate is `server_cert_path`, with
    /// nothing else set.
    pub fn new(url: impl Into<String>, server_cert_path: impl Into<PathBuf>) -> Self {
        Self {
            url: url.into(),
            server_cert_path: server_cert_path.into(),
            ..Self::default()
        }
    }

    /// The file's text as the kit writes it: `key=value` lines in the kit's order
    /// ([`KNOWN_KEYS`]), the URL as `brrpcurl`, keys without a value left out;
    /// [`parse`](Self::parse) reads it back.
    ///
    /// # Errors
    /// [`ClientRpcError::Config`] naming the key whose value holds a line break.
    pub fn render(&self) -> Result<String, ClientRpcError> {
        let path = |p: &Path| p.display().to_string();
        let value = |key: &str| -> Option<String> {
            match key {
                "datadir" => self.datadir.as_deref().map(path),
                "brrpcurl" => Some(self.url.clone()),
                "rpcurl" => None,
                "servercertpath" => Some(path(&self.server_cert_path)),
                "clientcertpath" => self.client_cert_path.as_deref().map(path),
                "clientkeypath" => self.client_key_path.as_deref().map(path),
                "rpcuser" => Some(self.rpc_user.clone()),
                "rpcpass" => Some(self.rpc_pass.clone()),
                other => self.extra.get(other).cloned(),
            }
        };
        let mut text = String::new();
        for key in KNOWN_KEYS {
            let Some(v) = value(key).filter(|v| !v.is_empty()) else {
                continue;
            };
            if v.contains(['\n', '\r']) {
                return Err(ClientRpcError::Config(format!(
                    "{key}: a line break in {v:?}"
                )));
            }
            text.push_str(key);
            text.push('=');
            text.push_str(&v);
            text.push('\n');
        }
        Ok(text)
    }

    /// Reads and parses a config file.
    ///
    /// # Errors
    /// [`ClientRpcError::Io`] when the file cannot be read, else as [`parse`](Self::parse),
    /// the message starting with the file's path; [`ClientRpcError::Config`] naming the
    /// file and the key when a certificate or key file it names cannot be read (a
    /// relative path is taken from the current directory, as the kit does).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ClientRpcError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ClientRpcError::io(path, e))?;
        let config = Self::parse(&text).map_err(|e| match e {
            ClientRpcError::Config(why) => {
                ClientRpcError::Config(format!("{}: {why}", path.display()))
            }
            other => other,
        })?;
        let files = [
            ("servercertpath", Some(&config.server_cert_path)),
            ("clientcertpath", config.client_cert_path.as_ref()),
            ("clientkeypath", config.client_key_path.as_ref()),
        ];
        for (key, file) in files {
            if let Some(file) = file
                && let Err(e) = std::fs::File::open(file)
            {
                return Err(ClientRpcError::Config(format!(
                    "{}: {key} {}: {e}",
                    path.display(),
                    file.display()
                )));
            }
        }
        Ok(config)
    }
}

/// `~/x` → `$HOME/x`; anything else unchanged.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// A `wss://` URL split into what the connection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Host as written, without IPv6 brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The full URL, path fixed up to `/ws` when empty.
    pub(crate) url: String,
}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> Result<Self, ClientRpcError> {
        let bad = |why: &str| ClientRpcError::Config(format!("url {url:?}: {why}"));
        let rest = url
            .strip_prefix("wss://")
            .ok_or_else(|| bad("must start with wss://"))?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("user info is not supported; set basic auth instead"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("junk after ]")),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad("bad port"))?,
            None => 443,
        };
        let url = if path.is_empty() || path == "/" {
            format!("wss://{authority}/ws")
        } else {
            url.to_owned()
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_parses_hosts_ports_and_fixes_the_path() {
        let e = Endpoint::parse("wss://127.0.0.1:7676/ws").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 7676));
        assert_eq!(e.url, "wss://127.0.0.1:7676/ws");
        let e = Endpoint::parse("wss://[::1]:7676").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 7676));
        assert_eq!(e.url, "wss://[::1]:7676/ws");
        let e = Endpoint::parse("wss://localhost/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("localhost", 443));
        assert_eq!(e.url, "wss://localhost/ws");
        assert!(Endpoint::parse("ws://127.0.0.1:7676/ws").is_err());
        assert!(Endpoint::parse("wss://:7676/ws").is_err());
        assert!(Endpoint::parse("wss://h:port/ws").is_err());
    }

    #[test]
    fn a_rendered_config_is_in_kit_order_and_parses_back() {
        let mut conf = BotConfig::new("wss://127.0.0.1:7676/ws", "/b/rpc.cert");
        conf.datadir = Some(PathBuf::from("/b"));
        conf.client_cert_path = Some(PathBuf::from("/b/rpc-client.cert"));
        conf.client_key_path = Some(PathBuf::from("/b/rpc-client.key"));
        conf.rpc_user = "u".into();
        conf.rpc_pass = "p".into();
        conf.extra.insert("maxlogfiles".into(), "5".into());
        conf.extra.insert("debug".into(), "info".into());
        let text = conf.render().unwrap();
        let keys: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            [
                "datadir",
                "brrpcurl",
                "servercertpath",
                "clientcertpath",
                "clientkeypath",
                "rpcuser",
                "rpcpass",
                "debug",
                "maxlogfiles"
            ]
        );
        assert_eq!(BotConfig::parse(&text).unwrap(), conf);
        conf.rpc_pass = "a\nb".into();
        let err = conf.render().unwrap_err().to_string();
        assert!(err.contains("rpcpass"), "{err}");
    }
}
