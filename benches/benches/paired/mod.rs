//! Two routines timed in alternating batches, each first in every other round. On a
//! shared machine the load changes between criterion's sequential measurements;
//! alternating batches see the same load, so their ratio can be read even when absolute
//! times drift.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Calls per batch: long enough to time, short enough to sample the load often.
const BATCH: u32 = 64;

/// Batches per side, at least.
const ROUNDS: usize = 301;

/// Time the batches take, at least: for short routines 301 rounds last a few
/// milliseconds, which one spell of another process's load can cover almost entirely.
const MIN_TIME: Duration = Duration::from_millis(150);

/// Medians over the batches of `a`'s and `b`'s time per call (ns), and of the batch
/// ratios b/a.
pub(crate) struct Paired {
    pub(crate) a_ns: f64,
    pub(crate) b_ns: f64,
    pub(crate) b_over_a: f64,
}

/// Runs `a` and `b` in alternating batches.
pub(crate) fn paired<T, U>(a: impl FnMut() -> T, b: impl FnMut() -> U) -> Paired {
    paired_in(BATCH, ROUNDS, a, b)
}

/// Runs `a` and `b` in alternating batches of `batch` calls, at least `rounds` rounds
/// and [`MIN_TIME`]: fewer and smaller for routines of milliseconds.
#[allow(dead_code)] // the C ABI's bench times short routines only
pub(crate) fn paired_in<T, U>(
    batch: u32,
    rounds: usize,
    mut a: impl FnMut() -> T,
    mut b: impl FnMut() -> U,
) -> Paired {
    // Generic, so each routine is inlined into its own timing loop.
    fn time<V>(batch: u32, f: &mut impl FnMut() -> V) -> f64 {
        let start = Instant::now();
        for _ in 0..batch {
            black_box(f());
        }
        start.elapsed().as_secs_f64() * 1e9 / f64::from(batch)
    }
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let start = Instant::now();
    let mut round = 0;
    while round < rounds || start.elapsed() < MIN_TIME {
        // Each goes first every other round, so neither gains from its place.
        let (x, y) = if round % 2 == 0 {
            let x = time(batch, &mut a);
            (x, time(batch, &mut b))
        } else {
            let y = time(batch, &mut b);
            (time(batch, &mut a), y)
        };
        ta.push(x);
        tb.push(y);
        ratio.push(y / x);
        round += 1;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Paired {
        a_ns: median(&mut ta),
        b_ns: median(&mut tb),
        b_over_a: median(&mut ratio),
    }
}
