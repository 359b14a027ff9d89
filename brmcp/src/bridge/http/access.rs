//! Who may reach the endpoints: the `Host` and `Origin` checks against DNS rebinding
//! and cross-site pages, the remote addresses of `allowed_ips`, the agents' bearer
//! tokens, and the user's approval secret.

use std::net::SocketAddr;
use std::path::Path;

use axum::http::{HeaderMap, HeaderValue, header};
use sha2::{Digest, Sha256};

use super::Endpoint;
use super::sessions::TokenKey;
use crate::bridge::settings::{Caller, agent_of, same_digest};
use crate::bridge::{Config, Settings, existing_approval_secret};

/// Host names always accepted: the loopback names.
pub(crate) const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The accepted hosts: the loopback names, the configured names, the listen address
/// and the local address the connection reached (`local`, which for a wildcard bind
/// is the interface's address the agent dialed).
pub(super) fn allowed_hosts(config: &Config, local: Option<SocketAddr>) -> Vec<String> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    hosts.extend(config.allowed_hosts.iter().cloned());
    for ip in [Some(config.listen.ip()), local.map(|a| a.ip())]
        .into_iter()
        .flatten()
    {
        if !ip.is_unspecified() {
            hosts.push(ip.to_canonical().to_string());
        }
    }
    hosts
}

fn host_matches(allowed: &[String], host: &str, port: Option<u16>) -> bool {
    allowed.iter().any(|allowed| {
        let (a_host, a_port) = split_host(allowed);
        let a_port = a_port.map(str::parse::<u16>);
        a_host.eq_ignore_ascii_case(host) && a_port.is_none_or(|p| p.is_ok_and(|p| Some(p) == port))
    })
}

/// The host part and port of an allowed host as configured (`[::1]:80`, `::1`,
/// `localhost`, `a.b:8891`): ours, so read leniently; what a request presents is
/// read by [`authority`].
fn split_host(value: &str) -> (&str, Option<&str>) {
    if let Some(rest) = value.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return (value, None);
        };
        return (host, after.strip_prefix(':'));
    }
    match value.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (value, None),
    }
}

/// The host and port of an authority a request presents (a `Host` value, an
/// `Origin`'s after the scheme), read strictly: a host (a name of letters, digits,
/// `-`, `_` and `.`, or an IPv6 address in brackets) and, after one `:`, an optional
/// port of digits that fits 16 bits. Anything else (userinfo, a path, two ports, an
/// empty or signed port, a bare IPv6 address) is `None`: no browser sends it.
fn authority(value: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let ok = !host.is_empty()
            && host.contains(':')
            && host
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ok {
            return None;
        }
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        let (host, port) = match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        };
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !ok {
            return None;
        }
        (host, port)
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    Some((host, port))
}

/// The one value of header `name`; `None` when it is absent, not text, or sent more
/// than once.
fn single<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
}

/// Whether the request's `Host` is one header, read strictly (see [`authority`]),
/// naming an allowed host (and its port, when the allowed entry has one).
pub(crate) fn host_allowed(allowed: &[String], headers: &HeaderMap) -> bool {
    let Some((host, port)) = single(headers, &header::HOST).and_then(authority) else {
        return false;
    };
    host_matches(allowed, host, port)
}

/// An absent `Origin` passes (agents are not browsers); a present one must be one
/// header, `http://` or `https://` an allowed host (any port, as browsers send the
/// page's), read strictly.
pub(crate) fn origin_allowed(allowed: &[String], headers: &HeaderMap) -> bool {
    if headers.get(header::ORIGIN).is_none() {
        return true;
    }
    let Some(value) = single(headers, &header::ORIGIN) else {
        return false;
    };
    let Some(rest) = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
    else {
        return false;
    };
    let Some((host, _)) = authority(rest) else {
        return false;
    };
    host_matches(allowed, host, None)
}

/// The key of the bearer token presented (zeros when none).
pub(super) fn token_key(headers: &HeaderMap) -> TokenKey {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .map(|(_, token)| Sha256::digest(token.trim().as_bytes()).into())
        .unwrap_or_default()
}

/// Whether the `Authorization` header carries the token of an agent.
pub(super) fn authorized(settings: &Settings, headers: &HeaderMap) -> bool {
    caller_of(settings, headers).is_some()
}

/// The agent whose token the `Authorization` header carries: the file's `token`
/// (the default agent) or one of `agents` (by hash). Every token is compared, each in
/// constant time, whichever matches.
pub(super) fn caller_of(settings: &Settings, headers: &HeaderMap) -> Option<Caller> {
    let presented = presented_digest(headers);
    let default = bearer_is(headers, &settings.token);
    let agent = presented.and_then(|d| agent_of(&settings.agents, &d));
    match (default, agent) {
        (true, _) => Some(Caller::Default),
        (false, Some(name)) => Some(Caller::Agent(name.to_owned())),
        (false, None) => None,
    }
}

/// The refusal of `endpoint` to `caller`, when it is a bot outside the agent's own
/// list of bots.
pub(super) fn not_the_agents_bot(
    settings: &Settings,
    caller: &Caller,
    endpoint: Endpoint,
) -> Option<String> {
    let (Caller::Agent(name), Endpoint::Bot(uid)) = (caller, endpoint) else {
        return None;
    };
    let agent = settings.agent(name)?;
    (!agent.allows_bot(&uid.to_string())).then(|| {
        format!(
            "forbidden: bot {} is not one of agent {name:?}'s bots",
            settings.bot_label(&uid)
        )
    })
}

/// The SHA-256 of a `Bearer` credential, when the header carries one.
fn presented_digest(headers: &HeaderMap) -> Option<[u8; 32]> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| Sha256::digest(token.trim().as_bytes()).into())
}

/// Whether the `Authorization` header carries the user's approval secret of
/// `data_dir` (see [`crate::bridge::approval_secret`]): the check of every route that
/// decides payments, which an agent's token never passes. No secret made yet
/// authorizes no one.
pub(crate) fn authorize_user(data_dir: &Path, headers: &HeaderMap) -> bool {
    match existing_approval_secret(data_dir) {
        Ok(Some(secret)) => bearer_is(headers, &secret),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(error = %e, "approval secret not read");
            false
        }
    }
}

/// Whether an `Authorization` value has the bearer scheme (any case) and a credential.
pub(super) fn bearer_scheme(value: &HeaderValue) -> bool {
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
}

/// Whether the `Authorization` header is `Bearer <expected>`: scheme
/// case-insensitive, compared in constant time; an empty `expected` never matches.
fn bearer_is(headers: &HeaderMap, expected: &str) -> bool {
    if expected.is_empty() {
        return false;
    }
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, token)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    // Comparing digests takes the same time whatever the tokens' contents and lengths.
    let a: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
    let b: [u8; 32] = Sha256::digest(expected.as_bytes()).into();
    same_digest(&a, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_header_forms() {
        assert_eq!(split_host("localhost:8891"), ("localhost", Some("8891")));
        assert_eq!(split_host("[::1]:80"), ("::1", Some("80")));
        assert_eq!(split_host("::1"), ("::1", None));
        assert_eq!(split_host("example.com"), ("example.com", None));
        assert_eq!(authority("localhost:8891"), Some(("localhost", Some(8891))));
        assert_eq!(authority("[::1]:80"), Some(("::1", Some(80))));
        assert_eq!(authority("[::1]"), Some(("::1", None)));
        assert_eq!(authority("127.0.0.1"), Some(("127.0.0.1", None)));
        assert_eq!(authority("a-b_c.example"), Some(("a-b_c.example", None)));
    }

    fn hosts(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::HOST, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_host_is_one_header_a_host_and_a_numeric_port() {
        let mut allowed: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        allowed.push("bridge.example:8891".into());
        for good in [
            "127.0.0.1",
            "127.0.0.1:8891",
            "localhost:1",
            "LOCALHOST:65535",
            "[::1]:8891",
            "[::1]",
            "bridge.example:8891",
        ] {
            assert!(host_allowed(&allowed, &hosts(&[good])), "{good}");
        }
        for bad in [
            "127.0.0.1:8891@evil.example",
            "evil.example@127.0.0.1:8891",
            "127.0.0.1:evil",
            "127.0.0.1:",
            "127.0.0.1:+80",
            "127.0.0.1:-1",
            "127.0.0.1:65536",
            "127.0.0.1:8891:8891",
            "127.0.0.1:88 91",
            "127.0.0.1/x",
            "127.0.0.1#x",
            "::1",
            "[::1]8891",
            "[::1%lo]:8891",
            "[127.0.0.1]:8891",
            "[]:8891",
            ":8891",
            "",
            "bridge.example:8892",
            "bridge.example",
            "evil.example",
        ] {
            assert!(!host_allowed(&allowed, &hosts(&[bad])), "{bad:?}");
        }
        assert!(!host_allowed(&allowed, &hosts(&[])), "none");
        assert!(
            !host_allowed(&allowed, &hosts(&["127.0.0.1:8891", "127.0.0.1:8891"])),
            "two Host headers, even the same"
        );
        assert!(!host_allowed(
            &allowed,
            &hosts(&["127.0.0.1", "evil.example"])
        ));
    }

    #[test]
    fn an_origin_is_one_header_of_an_allowed_host() {
        let allowed: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::ORIGIN, HeaderValue::from_str(v).unwrap());
            }
            origin_allowed(&allowed, &h)
        };
        assert!(with(&[]), "agents send none");
        assert!(with(&["http://127.0.0.1:8891"]));
        assert!(with(&["https://localhost"]));
        assert!(with(&["http://[::1]:9999"]));
        for bad in [
            "null",
            "http://evil.example",
            "http://127.0.0.1:8891@evil.example",
            "http://127.0.0.1:x",
            "http://127.0.0.1/",
            "ftp://127.0.0.1",
        ] {
            assert!(!with(&[bad]), "{bad}");
        }
        assert!(!with(&["http://127.0.0.1", "http://127.0.0.1"]), "two");
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_required() {
        let settings = Settings {
            token: "s3cret".into(),
            ..Settings::default()
        };
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            authorized(&settings, &h)
        };
        assert!(with("Bearer s3cret"));
        assert!(with("bearer s3cret"));
        assert!(with("BEARER s3cret"));
        assert!(!with("s3cret"), "a raw token is refused");
        assert!(!with("Bearer s3cre"));
        assert!(!with("Bearer s3crett"));
        assert!(!with("Basic s3cret"));
        assert!(!authorized(&settings, &HeaderMap::new()));
        let empty = Settings::default();
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert!(!authorized(&empty, &h), "an empty token never authorizes");
    }

    #[test]
    fn each_agent_is_known_by_its_own_token() {
        use crate::bridge::AgentEntry;
        let settings = Settings {
            token: "d".repeat(32),
            agents: vec![
                AgentEntry::new("ci", &"c".repeat(32), 1, 1, Vec::new()),
                AgentEntry::new("chat", &"h".repeat(32), 1, 1, Vec::new()),
            ],
            ..Settings::default()
        };
        let with = |t: &str| {
            let mut h = HeaderMap::new();
            let v = format!("Bearer {t}");
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(&v).unwrap());
            caller_of(&settings, &h)
        };
        assert_eq!(with(&"d".repeat(32)), Some(Caller::Default));
        assert_eq!(with(&"c".repeat(32)), Some(Caller::Agent("ci".into())));
        assert_eq!(with(&"h".repeat(32)), Some(Caller::Agent("chat".into())));
        assert_eq!(with(&"x".repeat(32)), None);
        let hash = settings.agents[0].token_sha256.clone();
        assert_eq!(with(&hash), None, "the hash is not the token");
    }

    #[test]
    fn only_the_approval_secret_authorizes_the_user() {
        let dir = tempfile::tempdir().unwrap();
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            authorize_user(dir.path(), &h)
        };
        assert!(!with("Bearer "), "no secret made: no one");
        let secret = crate::bridge::approval_secret(dir.path()).unwrap();
        assert!(with(&format!("Bearer {secret}")));
        assert!(with(&format!("bearer {secret}")));
        assert!(!with(&secret), "a raw secret is refused");
        assert!(!with(&format!("Bearer {}", &secret[1..])));
        assert!(!authorize_user(dir.path(), &HeaderMap::new()));
    }
}
