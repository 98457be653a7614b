//! Host-time profile of the forward path: with `MXMOE_HOST_PROFILE=N` (N > 0) the forward marks
//! the end of each host step (`host_mark`), and every N forwards stderr gets the mean
//! microseconds of each step (the time since the previous mark), so the wall time outside the
//! GPU passes can be attributed; the first profiled forward also prints the round trip of a
//! minimal submission (one 4-byte copy, submit, map, wait: [`once`]), the floor under any
//! forward's wall time on that device. Off (one relaxed load per mark) otherwise.

use std::cell::RefCell;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn every() -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MXMOE_HOST_PROFILE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

thread_local! {
    static MARKS: RefCell<Vec<(&'static str, Instant)>> = const { RefCell::new(Vec::new()) };
}

struct Sums {
    label: String,
    forwards: u64,
    steps: Vec<(&'static str, f64)>,
}
static SUMS: Mutex<Sums> = Mutex::new(Sums {
    label: String::new(),
    forwards: 0,
    steps: Vec::new(),
});

fn print(s: &mut Sums) {
    if s.forwards == 0 {
        return;
    }
    let f = s.forwards as f64;
    let total: f64 = s.steps.iter().map(|(_, v)| v).sum::<f64>() / f;
    let parts: Vec<String> = s
        .steps
        .iter()
        .map(|(k, v)| format!("{k} {:.1}", v / f))
        .collect();
    eprintln!(
        "host profile ({}, mean us over {} forwards): total {total:.1} = {}",
        s.label,
        s.forwards,
        parts.join(", ")
    );
    s.forwards = 0;
    s.steps.clear();
}

/// With profiling on, the first call in the process prints `f()` to stderr (e.g. a round-trip
/// probe); later calls and calls with profiling off do nothing.
pub fn once(f: impl FnOnce() -> String) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if every() > 0 && !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("host profile: {}", f());
    }
}

/// Start a forward's profile (clears this thread's marks).
pub fn start() {
    if every() > 0 {
        MARKS.with(|m| {
            let mut m = m.borrow_mut();
            m.clear();
            m.push(("start", Instant::now()));
        });
    }
}

/// The host step `name` ends now.
pub fn mark(name: &'static str) {
    if every() > 0 {
        MARKS.with(|m| m.borrow_mut().push((name, Instant::now())));
    }
}

/// End a forward: add its steps to the sums of `label` (the sums of another label are
/// printed and cleared first); print the means every N forwards.
pub fn finish(label: impl FnOnce() -> String) {
    let n = every();
    if n == 0 {
        return;
    }
    let marks = MARKS.with(|m| std::mem::take(&mut *m.borrow_mut()));
    if marks.len() < 2 {
        return;
    }
    let label = label();
    let mut s = SUMS.lock().unwrap_or_else(|p| p.into_inner());
    if s.label != label {
        print(&mut s);
        s.label = label;
    }
    s.forwards += 1;
    for w in marks.windows(2) {
        let us = (w[1].1 - w[0].1).as_secs_f64() * 1e6;
        match s.steps.iter_mut().find(|(k, _)| *k == w[1].0) {
            Some(e) => e.1 += us,
            None => s.steps.push((w[1].0, us)),
        }
    }
    if s.forwards >= n {
        print(&mut s);
    }
}
