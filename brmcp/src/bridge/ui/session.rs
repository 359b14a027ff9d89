//! The local pages' sessions: a single-use login code exchanged once for a random
//! session token, held in memory only. The page's script keeps the token in the
//! browser's `sessionStorage`, which belongs to one origin (scheme, host and port),
//! and sends it in [`SESSION_HEADER`] on every API request, reads included; no cookie
//! is set. A cookie is shared by every port of a host, so another local server that
//! the browser visits would receive it: a cookie, alone or as a second factor, would
//! guard against nothing that script of the page's own origin could not do anyway.
//! The header is also the pages' CSRF guard: another site's page can neither read the
//! token nor send the header (no CORS is answered).
//!
//! Each session remembers the secret that opened it (its digest): when the secret's
//! file changes (rotated or replaced), every session it opened ends at its next
//! request.
//!
//! Sans-IO: the store takes the time and the current secret it is given and reads
//! header values; the HTTP code around it reads the headers and the secret's file.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::bridge::lock;
use crate::bridge::random_hex;
use crate::bridge::settings::same_digest;

/// The header every API request (and the logout) carries its session token in.
pub(crate) const SESSION_HEADER: &str = "x-brmcp-session";

/// Sessions held at once: 16, the browsers and tabs of one user with room to spare;
/// a new login past it ends the least recently used one, so logins cannot grow memory.
pub(crate) const MAX_UI_SESSIONS: usize = 16;

/// A session unused this long ends: 12 hours, a working day with the page open
/// (it polls every few seconds, so an open page never idles out).
pub(crate) const UI_SESSION_IDLE: Duration = Duration::from_secs(12 * 60 * 60);

/// Random bytes of a session token: 32, beyond guessing.
const TOKEN_BYTES: usize = 32;

/// The digest of the secret that opened a session: which generation of it.
pub(crate) type Generation = [u8; 32];

struct Held {
    generation: Generation,
    used: Instant,
}

/// The sessions of one page's listener.
#[derive(Default)]
pub(crate) struct UiSessions {
    /// By the SHA-256 of the token: a lookup's time tells nothing of the tokens.
    held: Mutex<HashMap<[u8; 32], Held>>,
}

/// Why a session could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoginError {
    /// The system's random source failed.
    #[error("no randomness for a session")]
    Random,
}

impl UiSessions {
    /// A new session at `now`, opened by the secret of `generation`: its token. The
    /// least recently used one ends when [`MAX_UI_SESSIONS`] are held, and so does
    /// every one an older secret opened.
    pub(crate) fn begin(&self, generation: Generation, now: Instant) -> Result<String, LoginError> {
        let token = random_hex::<TOKEN_BYTES>().map_err(|_| LoginError::Random)?;
        let mut held = lock(&self.held);
        held.retain(|_, h| {
            now.saturating_duration_since(h.used) < UI_SESSION_IDLE
                && same_digest(&h.generation, &generation)
        });
        while held.len() >= MAX_UI_SESSIONS {
            let Some(oldest) = held.iter().min_by_key(|(_, h)| h.used).map(|(k, _)| *k) else {
                break;
            };
            held.remove(&oldest);
        }
        held.insert(
            digest(&token),
            Held {
                generation,
                used: now,
            },
        );
        Ok(token)
    }

    /// Whether `token` (a [`SESSION_HEADER`] value) is a live session of the secret
    /// of `current` (`None`: no secret, so no session), which counts as used at
    /// `now`. A session of another secret or idle too long ends here: unknown,
    /// ended and absent tokens are all `false`.
    pub(crate) fn check(
        &self,
        token: Option<&str>,
        current: Option<&Generation>,
        now: Instant,
    ) -> bool {
        let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
            return false;
        };
        let key = digest(token);
        let mut held = lock(&self.held);
        let Some(session) = held.get_mut(&key) else {
            return false;
        };
        let idle = now.saturating_duration_since(session.used) >= UI_SESSION_IDLE;
        let same = current.is_some_and(|c| same_digest(c, &session.generation));
        if idle || !same {
            held.remove(&key);
            return false;
        }
        session.used = now;
        true
    }

    /// Whether `token` is a live session of the secret of `current`, changing
    /// nothing: for deciding which requests are the user's before answering them.
    pub(crate) fn holds(
        &self,
        token: Option<&str>,
        current: Option<&Generation>,
        now: Instant,
    ) -> bool {
        let (Some(token), Some(current)) = (token.map(str::trim), current) else {
            return false;
        };
        lock(&self.held).get(&digest(token)).is_some_and(|s| {
            now.saturating_duration_since(s.used) < UI_SESSION_IDLE
                && same_digest(current, &s.generation)
        })
    }

    /// Ends the session of `token`.
    pub(crate) fn end(&self, token: &str) {
        lock(&self.held).remove(&digest(token.trim()));
    }

    /// Sessions held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.held).len()
    }
}

/// The generation of `secret`: its digest, which sessions remember.
pub(crate) fn generation(secret: &str) -> Generation {
    digest(secret.trim())
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_opens_only_its_own_session() {
        let store = UiSessions::default();
        let t = Instant::now();
        let g = generation("s1");
        let a = store.begin(g, t).unwrap();
        let b = store.begin(g, t).unwrap();
        assert_ne!(a, b);
        assert!(store.check(Some(&a), Some(&g), t));
        assert!(store.check(Some(&b), Some(&g), t));
        assert!(!store.check(Some(&a[1..]), Some(&g), t));
        assert!(!store.check(Some(""), Some(&g), t));
        assert!(!store.check(None, Some(&g), t));
        assert!(store.holds(Some(&a), Some(&g), t));
        assert!(!store.holds(Some(&a[1..]), Some(&g), t));
        store.end(&a);
        assert!(!store.check(Some(&a), Some(&g), t), "ended");
        assert!(store.check(Some(&b), Some(&g), t));
    }

    #[test]
    fn a_changed_secret_ends_the_sessions_it_opened() {
        let store = UiSessions::default();
        let t = Instant::now();
        let (old, new) = (generation("old"), generation("new"));
        let a = store.begin(old, t).unwrap();
        assert!(!store.holds(Some(&a), Some(&new), t));
        assert!(!store.holds(Some(&a), None, t));
        assert!(!store.check(Some(&a), Some(&new), t));
        // Ended for good: the old secret back does not revive it.
        assert!(!store.check(Some(&a), Some(&old), t));
        let b = store.begin(old, t).unwrap();
        assert!(!store.check(Some(&b), None, t), "no secret");
        let c = store.begin(old, t).unwrap();
        let d = store.begin(new, t).unwrap();
        assert_eq!(store.len(), 1, "a new secret's login drops the old ones");
        assert!(!store.check(Some(&c), Some(&old), t));
        assert!(store.check(Some(&d), Some(&new), t));
    }

    #[test]
    fn a_login_flood_keeps_the_bound_and_drops_the_least_recent() {
        let store = UiSessions::default();
        let t = Instant::now();
        let g = generation("s");
        let kept = store.begin(g, t).unwrap();
        for i in 1..=(MAX_UI_SESSIONS as u64 * 4) {
            let at = t + Duration::from_secs(i);
            // The user's page keeps polling: its session stays the most recent.
            assert!(store.check(Some(&kept), Some(&g), at));
            store.begin(g, at).unwrap();
            assert!(store.len() <= MAX_UI_SESSIONS);
        }
        assert!(store.check(Some(&kept), Some(&g), t));
    }

    #[test]
    fn an_idle_session_ends() {
        let store = UiSessions::default();
        let t = Instant::now();
        let g = generation("s");
        let a = store.begin(g, t).unwrap();
        let late = t + UI_SESSION_IDLE;
        assert!(!store.holds(Some(&a), Some(&g), late));
        assert!(!store.check(Some(&a), Some(&g), late));
        assert_eq!(store.len(), 0);
    }
}
