//! Where a data operation's time goes inside the data path: for reads, writes and fsyncs, how
//! many were served, the time from the handler's start to its reply (rule checks, lookups,
//! locks, copies and the backing call) and the backing system call's own share. The client
//! sees a longer time still: the rest is the kernel's FUSE round trip (queueing the request,
//! waking this process, copying, waking the caller). Lock-free and always on: a few clock
//! reads per operation, against a round trip of tens of microseconds.

use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub const OPERATIONS: [&str; 3] = ["read", "write", "fsync"];

#[derive(Default)]
struct Figures {
    served: AtomicU64,
    handler_ns: AtomicU64,
    syscall_ns: AtomicU64,
}

#[derive(Default)]
pub struct Profile {
    figures: [Figures; OPERATIONS.len()],
}

fn index(operation: &str) -> usize {
    OPERATIONS
        .iter()
        .position(|o| *o == operation)
        .expect("a profiled operation")
}

fn nanos(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

impl Profile {
    /// One operation served, its handler started at `started`.
    pub fn served(&self, operation: &str, started: Instant) {
        let figures = &self.figures[index(operation)];
        figures.served.fetch_add(1, Ordering::Relaxed);
        figures
            .handler_ns
            .fetch_add(nanos(started), Ordering::Relaxed);
    }

    /// Time `call` (the backing system call of `operation`).
    pub fn syscall<T>(&self, operation: &str, call: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = call();
        self.figures[index(operation)]
            .syscall_ns
            .fetch_add(nanos(started), Ordering::Relaxed);
        result
    }

    /// `{operation: {served, handler_s, syscall_s}}` so far.
    pub fn snapshot(&self) -> Value {
        let mut out = Map::new();
        for (operation, figures) in OPERATIONS.iter().zip(&self.figures) {
            let seconds = |ns: &AtomicU64| ns.load(Ordering::Relaxed) as f64 / 1e9;
            out.insert(
                (*operation).into(),
                json!({
                    "served": figures.served.load(Ordering::Relaxed),
                    "handler_s": seconds(&figures.handler_ns),
                    "syscall_s": seconds(&figures.syscall_ns),
                }),
            );
        }
        Value::Object(out)
    }
}
