//! The local pages' logins: a secret exchanged once for a random session id, held in
//! memory only and carried by an `HttpOnly`, `SameSite=Strict` cookie, with a
//! per-session CSRF token that every state-changing request repeats in a header.
//!
//! Sans-IO: the store takes the time it is given and reads header values; the HTTP
//! code around it sets and reads the headers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::bridge::lock;
use crate::bridge::random_hex;
use crate::bridge::settings::same_digest;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "brmcp_ui";

/// The header a state-changing request repeats its session's CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-brmcp-csrf";

/// Sessions held at once: 16, the browsers and tabs of one user with room to spare;
/// a new login past it ends the least recently used one, so logins cannot grow memory.
pub(crate) const MAX_UI_SESSIONS: usize = 16;

/// A session unused this long ends: 12 hours, a working day with the page open
/// (it polls every few seconds, so an open page never idles out).
pub(crate) const UI_SESSION_IDLE: Duration = Duration::from_secs(12 * 60 * 60);

/// Random bytes of a session id and of a CSRF token: 32, beyond guessing.
const TOKEN_BYTES: usize = 32;

struct Held {
    csrf: String,
    used: Instant,
}

/// The sessions of one page's listener.
#[derive(Default)]
pub(crate) struct UiSessions {
    /// By the SHA-256 of the session id: a lookup's time tells nothing of the ids.
    held: Mutex<HashMap<[u8; 32], Held>>,
}

/// A session made by a login: the cookie's value and its CSRF token.
pub(crate) struct Login {
    pub(crate) id: String,
    pub(crate) csrf: String,
}

/// Why a session could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoginError {
    /// The system's random source failed.
    #[error("no randomness for a session")]
    Random,
}

impl UiSessions {
    /// A new session at `now`; the least recently used one ends when
    /// [`MAX_UI_SESSIONS`] are held.
    pub(crate) fn begin(&self, now: Instant) -> Result<Login, LoginError> {
        let id = random_hex::<TOKEN_BYTES>().map_err(|_| LoginError::Random)?;
        let csrf = random_hex::<TOKEN_BYTES>().map_err(|_| LoginError::Random)?;
        let mut held = lock(&self.held);
        held.retain(|_, h| now.saturating_duration_since(h.used) < UI_SESSION_IDLE);
        while held.len() >= MAX_UI_SESSIONS {
            let Some(oldest) = held.iter().min_by_key(|(_, h)| h.used).map(|(k, _)| *k) else {
                break;
            };
            held.remove(&oldest);
        }
        held.insert(
            digest(&id),
            Held {
                csrf: csrf.clone(),
                used: now,
            },
        );
        Ok(Login { id, csrf })
    }

    /// The CSRF token of the live session the `Cookie` header `cookie` carries, which
    /// counts as used at `now`.
    pub(crate) fn check(&self, cookie: Option<&str>, now: Instant) -> Option<String> {
        let id = cookie_value(cookie?, COOKIE)?;
        let key = digest(id);
        let mut held = lock(&self.held);
        let session = held.get_mut(&key)?;
        if now.saturating_duration_since(session.used) >= UI_SESSION_IDLE {
            held.remove(&key);
            return None;
        }
        session.used = now;
        Some(session.csrf.clone())
    }

    /// Ends the session the `Cookie` header carries.
    pub(crate) fn end(&self, cookie: Option<&str>) {
        if let Some(id) = cookie.and_then(|c| cookie_value(c, COOKIE)) {
            lock(&self.held).remove(&digest(id));
        }
    }

    /// Sessions held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.held).len()
    }
}

/// Whether `presented` (a CSRF header's value) is `expected`, in constant time.
pub(crate) fn csrf_matches(expected: &str, presented: Option<&str>) -> bool {
    presented.is_some_and(|p| same_digest(&digest(expected), &digest(p.trim())))
}

/// Whether `presented` is the secret `expected`, in constant time; an empty
/// `expected` never matches.
pub(crate) fn secret_matches(expected: &str, presented: &str) -> bool {
    !expected.is_empty() && same_digest(&digest(expected), &digest(presented.trim()))
}

/// The `Set-Cookie` value of a session: `HttpOnly` (no script reads it),
/// `SameSite=Strict` (no other site's page sends it), scoped to the pages.
pub(crate) fn set_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value that ends the session in the browser.
pub(crate) fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The value of cookie `name` in a `Cookie` header.
fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(id: &str) -> String {
        format!("other=1; {COOKIE}={id}; x=y")
    }

    #[test]
    fn a_login_opens_only_its_own_session() {
        let store = UiSessions::default();
        let t = Instant::now();
        let a = store.begin(t).unwrap();
        let b = store.begin(t).unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(store.check(Some(&cookie(&a.id)), t), Some(a.csrf.clone()));
        assert_eq!(store.check(Some(&cookie(&b.id)), t), Some(b.csrf.clone()));
        assert_eq!(store.check(Some(&cookie(&a.id[1..])), t), None);
        assert_eq!(store.check(Some(&cookie("")), t), None);
        assert_eq!(store.check(Some("brmcp_uix=abc"), t), None);
        assert_eq!(store.check(None, t), None);
        assert!(csrf_matches(&a.csrf, Some(&a.csrf)));
        assert!(!csrf_matches(&a.csrf, Some(&b.csrf)));
        assert!(!csrf_matches(&a.csrf, None));
        store.end(Some(&cookie(&a.id)));
        assert_eq!(store.check(Some(&cookie(&a.id)), t), None, "logged out");
        assert!(store.check(Some(&cookie(&b.id)), t).is_some());
    }

    #[test]
    fn a_login_flood_keeps_the_bound_and_drops_the_least_recent() {
        let store = UiSessions::default();
        let t = Instant::now();
        let kept = store.begin(t).unwrap();
        for i in 1..=(MAX_UI_SESSIONS as u64 * 4) {
            let at = t + Duration::from_secs(i);
            // The user's page keeps polling: its session stays the most recent.
            assert!(store.check(Some(&cookie(&kept.id)), at).is_some());
            store.begin(at).unwrap();
            assert!(store.len() <= MAX_UI_SESSIONS);
        }
        assert!(store.check(Some(&cookie(&kept.id)), t).is_some());
    }

    #[test]
    fn an_idle_session_ends() {
        let store = UiSessions::default();
        let t = Instant::now();
        let a = store.begin(t).unwrap();
        let late = t + UI_SESSION_IDLE;
        assert_eq!(store.check(Some(&cookie(&a.id)), late), None);
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(secret_matches("abc", "abc"));
        assert!(secret_matches("abc", " abc\n"));
        assert!(!secret_matches("abc", "ab"));
        assert!(!secret_matches("", ""));
    }
}
