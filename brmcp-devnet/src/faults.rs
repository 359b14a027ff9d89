//! The fault dial: latency and jitter per message, PM drops the relay re-sends, nodes
//! taken off the relay, and slow key exchanges. All off by default.
//!
//! The dial lives in `<dir>/`[`FAULTS_FILE`], read live while the devnet runs
//! ([`Devnet::watch_faults`](super::Devnet::watch_faults)): a good edit applies within
//! [`FAULTS_POLL`]; a bad one is logged, naming the file and key, and the last good
//! dial stays. Parsing is strict: unknown keys, wrong types and values out of range
//! are refused.
//!
//! Randomness (jitter, drops) comes from a generator seeded by the dial's `seed`, so
//! a run with a seed repeats its rolls.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

/// The dial's file name in the devnet directory.
pub const FAULTS_FILE: &str = "faults.json";

/// How often a running devnet looks at the file: an edit applies about this soon.
pub(crate) const FAULTS_POLL: Duration = Duration::from_millis(200);

/// The largest latency or jitter: beyond a minute every client's timeouts fire and
/// the dial rehearses nothing.
const MAX_LATENCY_MS: u64 = 60_000;

/// The largest key-exchange time: a mediated exchange waits on two round trips
/// through the mediator, minutes at worst.
const MAX_KX_DELAY_MS: u64 = 600_000;

/// The largest drop rate: at 1 nothing would ever arrive, and drops are to become
/// delay, never loss.
const MAX_DROP_RATE: f64 = 0.9;

/// How long after a dropped PM the relay sends it again (on top of the latency): the
/// sender's client re-sends what the relay did not acknowledge.
pub(crate) const PM_RESEND: Duration = Duration::from_millis(500);

/// A fault dial. Every field's zero is "no fault".
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// Added to every PM's and tip invoice request's trip through the relay, in ms.
    pub latency_ms: u64,
    /// Up to this much more, uniformly, per message, in ms.
    pub jitter_ms: u64,
    /// The share of PM deliveries the relay drops and sends again after
    /// half a second and another trip (`0..=0.9`).
    pub pm_drop_rate: f64,
    /// Nicks of nodes off the relay: they receive no PMs or tips until back, then get
    /// what waited, in order.
    pub offline: BTreeSet<String>,
    /// How long a mediated key exchange takes, in ms.
    pub kx_delay_ms: u64,
    /// The random generator's seed; a random one when unset.
    pub seed: Option<u64>,
}

/// A dial file that cannot be used: which file, which key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{detail}", path.display(), key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
pub struct FaultsError {
    /// The file.
    pub path: PathBuf,
    /// The key at fault, if one is.
    pub key: Option<String>,
    /// What is wrong.
    pub detail: String,
}

impl Faults {
    /// Whether any fault is on.
    pub fn is_off(&self) -> bool {
        self.latency_ms == 0
            && self.jitter_ms == 0
            && self.pm_drop_rate == 0.0
            && self.offline.is_empty()
            && self.kx_delay_ms == 0
    }

    /// Parses the dial strictly; `path` names the file in errors.
    ///
    /// # Errors
    ///
    /// Invalid JSON, not an object, an unknown key, a wrong type or a value out of
    /// range.
    pub fn parse(path: &Path, text: &str) -> Result<Self, FaultsError> {
        let err = |key: Option<&str>, detail: String| FaultsError {
            path: path.to_path_buf(),
            key: key.map(str::to_owned),
            detail,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| err(None, format!("invalid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(err(None, "expected a JSON object".to_owned()));
        };
        let mut f = Self::default();
        for (key, v) in &map {
            let k = Some(key.as_str());
            let ms = |max: u64| match v.as_u64() {
                Some(n) if n <= max => Ok(n),
                _ => Err(err(k, format!("expected whole milliseconds, 0 to {max}"))),
            };
            match key.as_str() {
                "latency_ms" => f.latency_ms = ms(MAX_LATENCY_MS)?,
                "jitter_ms" => f.jitter_ms = ms(MAX_LATENCY_MS)?,
                "kx_delay_ms" => f.kx_delay_ms = ms(MAX_KX_DELAY_MS)?,
                "pm_drop_rate" => {
                    f.pm_drop_rate = v
                        .as_f64()
                        .filter(|r| (0.0..=MAX_DROP_RATE).contains(r))
                        .ok_or_else(|| {
                            err(k, format!("expected a number from 0 to {MAX_DROP_RATE}"))
                        })?;
                }
                "seed" => {
                    f.seed = match v {
                        Value::Null => None,
                        v => Some(v.as_u64().ok_or_else(|| {
                            err(k, "expected a non-negative whole number".to_owned())
                        })?),
                    };
                }
                "offline" => {
                    let bad = || err(k, "expected an array of node nicks".to_owned());
                    for nick in v.as_array().ok_or_else(bad)? {
                        f.offline.insert(nick.as_str().ok_or_else(bad)?.to_owned());
                    }
                }
                _ => {
                    return Err(err(
                        k,
                        "unknown key (expected latency_ms, jitter_ms, pm_drop_rate, \
                         offline, kx_delay_ms or seed)"
                            .to_owned(),
                    ));
                }
            }
        }
        Ok(f)
    }

    /// The dial as its file holds it, every key present.
    pub fn to_json(&self) -> String {
        let mut map = Map::new();
        map.insert("latency_ms".into(), json!(self.latency_ms));
        map.insert("jitter_ms".into(), json!(self.jitter_ms));
        map.insert("pm_drop_rate".into(), json!(self.pm_drop_rate));
        map.insert("offline".into(), json!(self.offline));
        map.insert("kx_delay_ms".into(), json!(self.kx_delay_ms));
        map.insert("seed".into(), json!(self.seed));
        format!("{:#}\n", Value::Object(map))
    }
}

/// The dial in `dir`, `None` when there is no file.
///
/// # Errors
///
/// The file cannot be read or parsed ([`Faults::parse`]).
pub fn read_faults(dir: &Path) -> Result<Option<Faults>, FaultsError> {
    let path = dir.join(FAULTS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Faults::parse(&path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FaultsError {
            path,
            key: None,
            detail: e.to_string(),
        }),
    }
}

/// Writes the dial to `dir` atomically (a running devnet never reads half a file).
///
/// # Errors
///
/// The file cannot be written.
pub fn write_faults(dir: &Path, faults: &Faults) -> std::io::Result<()> {
    brmcp_fs::write_atomic(&dir.join(FAULTS_FILE), faults.to_json().as_bytes())
}

impl super::Devnet {
    /// Puts `faults` in force: nodes newly listed offline leave the relay, nodes no
    /// longer listed come back (and get what waited, in order). Nicks that are no
    /// node of this run are ignored, with a warning.
    pub fn set_faults(&self, faults: Faults) {
        apply(&self.net, faults);
    }

    /// The dial in force.
    pub fn faults(&self) -> Faults {
        self.net.dial().faults.clone()
    }

    /// Reads `<dir>/`[`FAULTS_FILE`] now and every 200 ms until the devnet
    /// stops, putting each good version in force; a bad one is logged and the last
    /// good dial stays. A missing file is the dial with every fault off.
    ///
    /// # Errors
    ///
    /// The file as it is now cannot be read or parsed (nothing is started then).
    pub fn watch_faults(&self) -> Result<(), FaultsError> {
        let dir = self.dir.clone();
        let first = read_faults(&dir)?.unwrap_or_default();
        let mut last_text = std::fs::read_to_string(dir.join(FAULTS_FILE)).ok();
        apply(&self.net, first);
        let net = self.net.clone();
        self.net.spawn(async move {
            loop {
                tokio::time::sleep(FAULTS_POLL).await;
                let path = dir.join(FAULTS_FILE);
                let text = std::fs::read_to_string(&path).ok();
                if text == last_text {
                    continue;
                }
                last_text.clone_from(&text);
                let parsed = match &text {
                    Some(text) => Faults::parse(&path, text),
                    None => Ok(Faults::default()),
                };
                match parsed {
                    Ok(faults) => {
                        tracing::info!(file = %path.display(), "devnet fault dial changed");
                        apply(&net, faults);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "devnet fault dial not changed: keeping the last good one");
                    }
                }
            }
        });
        Ok(())
    }
}

/// Puts a dial in force (see [`Devnet::set_faults`](super::Devnet::set_faults)).
fn apply(net: &super::Net, faults: Faults) {
    let before = std::mem::replace(&mut *net.dial(), Dial::new(faults.clone()));
    let now = net.clock.now_ms();
    {
        let mut st = net.lock();
        for nick in &faults.offline {
            if !st.nodes.iter().any(|n| &n.nick == nick) {
                tracing::warn!(nick = %nick, "devnet fault dial: no such node to take offline");
            }
        }
        for i in 0..st.nodes.len() {
            let nick = &st.nodes[i].nick;
            let (was, is) = (
                before.faults.offline.contains(nick),
                faults.offline.contains(nick),
            );
            if was != is {
                st.set_online(i, !is, now, net.cfg.relay_expiry);
            }
        }
    }
    net.changed.notify_waiters();
}

/// The dial in force and its random generator.
#[derive(Debug)]
pub(crate) struct Dial {
    pub(crate) faults: Faults,
    rng: SplitMix64,
}

impl Default for Dial {
    fn default() -> Self {
        Self::new(Faults::default())
    }
}

impl Dial {
    pub(crate) fn new(faults: Faults) -> Self {
        let seed = faults
            .seed
            .unwrap_or_else(|| u64::from_le_bytes(super::random_bytes()));
        Self {
            faults,
            rng: SplitMix64(seed),
        }
    }

    /// One message's trip: the latency plus its jitter.
    pub(crate) fn trip(&mut self) -> Duration {
        let jitter = match self.faults.jitter_ms {
            0 => 0,
            j => self.rng.next() % (j + 1),
        };
        Duration::from_millis(self.faults.latency_ms + jitter)
    }

    /// Whether the relay drops this delivery.
    pub(crate) fn drops(&mut self) -> bool {
        self.faults.pm_drop_rate > 0.0 && self.rng.unit() < self.faults.pm_drop_rate
    }

    /// Whether a PM goes through the relay's queue rather than straight to the log.
    pub(crate) fn delays_pms(&self) -> bool {
        self.faults.latency_ms > 0 || self.faults.jitter_ms > 0 || self.faults.pm_drop_rate > 0.0
    }

    pub(crate) fn kx_delay(&self) -> Duration {
        Duration::from_millis(self.faults.kx_delay_ms)
    }
}

/// SplitMix64: small, seedable, good enough for rolling faults.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        // 53 bits: exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        let x = (self.next() >> 11) as f64;
        x / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Faults, FaultsError> {
        Faults::parse(Path::new("d/faults.json"), text)
    }

    #[test]
    fn empty_object_is_every_fault_off() {
        let f = parse("{}").unwrap();
        assert!(f.is_off());
        assert_eq!(f, Faults::default());
    }

    #[test]
    fn full_dial_round_trips_through_its_file_text() {
        let f = parse(
            r#"{"latency_ms": 500, "jitter_ms": 50, "pm_drop_rate": 0.2,
                "offline": ["bob"], "kx_delay_ms": 3000, "seed": 7}"#,
        )
        .unwrap();
        assert_eq!(
            (f.latency_ms, f.jitter_ms, f.kx_delay_ms, f.seed),
            (500, 50, 3000, Some(7))
        );
        assert!(!f.is_off() && f.offline.contains("bob"));
        assert_eq!(parse(&f.to_json()).unwrap(), f);
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let e = parse(r#"{"latency": 5}"#).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("latency"));
        assert!(
            e.to_string()
                .starts_with("d/faults.json: latency: unknown key")
        );
        for (text, key) in [
            (r#"{"latency_ms": "5"}"#, "latency_ms"),
            (r#"{"latency_ms": -1}"#, "latency_ms"),
            (r#"{"jitter_ms": 1.5}"#, "jitter_ms"),
            (r#"{"latency_ms": 60001}"#, "latency_ms"),
            (r#"{"kx_delay_ms": 600001}"#, "kx_delay_ms"),
            (r#"{"pm_drop_rate": 1.0}"#, "pm_drop_rate"),
            (r#"{"pm_drop_rate": -0.1}"#, "pm_drop_rate"),
            (r#"{"offline": "bob"}"#, "offline"),
            (r#"{"offline": [1]}"#, "offline"),
            (r#"{"seed": -3}"#, "seed"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{text}");
            assert!(
                e.to_string()
                    .starts_with(&format!("d/faults.json: {key}: "))
            );
        }
        let e = parse("[1]").unwrap_err();
        assert_eq!((e.key, e.detail.as_str()), (None, "expected a JSON object"));
        assert!(parse("{").unwrap_err().detail.starts_with("invalid JSON"));
    }

    #[test]
    fn a_seed_repeats_its_rolls_and_rates_hold() {
        let f = parse(r#"{"latency_ms": 100, "jitter_ms": 40, "pm_drop_rate": 0.2, "seed": 9}"#)
            .unwrap();
        let roll = |mut d: Dial| -> Vec<(Duration, bool)> {
            (0..1000).map(|_| (d.trip(), d.drops())).collect()
        };
        let (a, b) = (roll(Dial::new(f.clone())), roll(Dial::new(f)));
        assert_eq!(a, b);
        assert!(a.iter().all(|(t, _)| (100..=140).contains(&t.as_millis())));
        assert!(a.iter().any(|(t, _)| t.as_millis() != 100));
        let drops = a.iter().filter(|(_, d)| *d).count();
        assert!((120..=280).contains(&drops), "{drops} of 1000 at 20%");
        let mut off = Dial::default();
        assert!(!off.delays_pms() && !off.drops() && off.trip().is_zero());
    }
}
