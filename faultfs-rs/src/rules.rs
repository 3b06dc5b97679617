//! The live fault state of one mount: named rules, their rate buckets and counters.
//!
//! Same semantics as `rsdrill/faultfs/state.py` (the Python layer): every data operation passes
//! through `admit()`, which fails it with the rule's errno, sleeps for added latency, or waits
//! for its rate bucket; waits end early when the rules change. Rules arrive already validated
//! by the Python control side (`Rule.to_dict()` plus the errno's number).

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const DATA_OPERATIONS: [&str; 2] = ["read", "write"];

/// A token bucket as GCRA: each request reserves its slot and learns how long to wait.
struct Bucket {
    rate: f64,
    burst: f64,
    base: Instant,
    tat: Mutex<f64>, // theoretical arrival time, seconds since `base`
}

impl Bucket {
    fn new(rate: f64, burst: f64) -> Bucket {
        Bucket {
            rate,
            burst,
            base: Instant::now(),
            tat: Mutex::new(0.0),
        }
    }

    fn reserve(&self, tokens: f64) -> f64 {
        let now = self.base.elapsed().as_secs_f64();
        let mut tat = self.tat.lock().unwrap();
        *tat = tat.max(now) + tokens / self.rate;
        (*tat - now - self.burst / self.rate).max(0.0)
    }
}

struct Cap {
    bucket: Arc<Bucket>,
    per_byte: bool,
}

impl Cap {
    fn reserve(&self, nbytes: usize) -> f64 {
        self.bucket.reserve(if self.per_byte {
            nbytes.max(1) as f64
        } else {
            1.0
        })
    }
}

/// One rule as the control side sent it, plus its caps per direction.
struct Active {
    name: String,
    raw: Value,
    errno: Option<i32>,
    operations: Vec<String>,
    probability: f64,
    path: Option<Vec<u8>>,
    latency_s: f64,
    detach: bool,
    caps_read: Vec<Cap>,
    caps_write: Vec<Cap>,
    hits: BTreeMap<&'static str, u64>,
}

fn number(rule: &Map<String, Value>, key: &str) -> Option<f64> {
    rule.get(key).and_then(Value::as_f64).filter(|v| *v > 0.0)
}

impl Active {
    fn parse(name: &str, rule: &Value, errno: Option<i32>) -> Result<Active, String> {
        let map = rule.as_object().ok_or("rule: not an object")?;
        let operations = match map.get("operations") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => vec!["write".into(), "fsync".into()],
        };
        let (mut caps_read, mut caps_write) = (Vec::new(), Vec::new());
        // A shared cap is one bucket both directions draw from.
        for (key, per_byte, read, write) in [
            ("iops", false, true, true),
            ("bytes_per_s", true, true, true),
            ("read_iops", false, true, false),
            ("write_iops", false, false, true),
            ("read_bytes_per_s", true, true, false),
            ("write_bytes_per_s", true, false, true),
        ] {
            if let Some(rate) = number(map, key) {
                // Bursts of a tenth of a second's worth: at least one operation, 128 KiB.
                let floor: f64 = if per_byte { 128.0 * 1024.0 } else { 1.0 };
                let bucket = Arc::new(Bucket::new(rate, floor.max(rate / 10.0)));
                if read {
                    caps_read.push(Cap {
                        bucket: bucket.clone(),
                        per_byte,
                    });
                }
                if write {
                    caps_write.push(Cap { bucket, per_byte });
                }
            }
        }
        Ok(Active {
            name: name.to_owned(),
            raw: rule.clone(),
            errno,
            operations,
            probability: map
                .get("probability")
                .and_then(Value::as_f64)
                .unwrap_or(1.0),
            path: map
                .get("path")
                .and_then(Value::as_str)
                .map(|p| p.as_bytes().to_vec()),
            latency_s: map.get("latency_s").and_then(Value::as_f64).unwrap_or(0.0),
            detach: map.get("detach").and_then(Value::as_bool).unwrap_or(false),
            caps_read,
            caps_write,
            hits: BTreeMap::new(),
        })
    }

    fn applies_to(&self, operation: &str, path: &[u8]) -> bool {
        if !self.operations.iter().any(|o| o == "any" || o == operation) {
            return false;
        }
        self.path.as_deref().is_none_or(|glob| fnmatch(glob, path))
    }

    fn caps(&self, operation: &str) -> &[Cap] {
        match operation {
            "read" => &self.caps_read,
            "write" => &self.caps_write,
            _ => &[],
        }
    }
}

/// Python's `fnmatch.fnmatchcase`: `*` and `?` match any character, `/` included;
/// `[seq]`, `[!seq]` and ranges inside brackets.
pub fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, n));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = bracket(pattern, p, name[n]) {
                        if matched {
                            p = next;
                            n += 1;
                            continue;
                        }
                    } else if name[n] == b'[' {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
                c if c == name[n] => {
                    p += 1;
                    n += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                p = sp + 1;
                n = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A bracket expression at `pattern[start]`: (does `c` match, index after it), or None if the
/// bracket is not closed (then `[` is a literal, as in Python).
fn bracket(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < pattern.len() && pattern[i] == b'!';
    if negate {
        i += 1;
    }
    let first = i;
    let mut matched = false;
    while i < pattern.len() && (pattern[i] != b']' || i == first) {
        let lo = pattern[i];
        if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            matched |= lo <= c && c <= pattern[i + 2];
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
    if i >= pattern.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

/// A small xorshift generator: the errno `probability` needs no better randomness.
fn random_unit() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = Instant::now().elapsed().as_nanos() as u64 ^ (std::process::id() as u64) << 32 | 1;
        x ^= std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Default)]
struct Inner {
    rules: Vec<Active>,
    counters: BTreeMap<String, u64>,
    generation: u64,
}

/// Rules by name, applied to each operation; shared by every FUSE worker thread.
#[derive(Default)]
pub struct FaultState {
    inner: Mutex<Inner>,
    changed: Condvar,
    /// Any rule set: the data path's fast check (no lock when nothing is set).
    active: AtomicBool,
    /// Reads and writes no rule was set for, counted without the lock.
    unruled: [AtomicU64; DATA_OPERATIONS.len()],
}

impl FaultState {
    pub fn set_rule(&self, name: &str, rule: &Value, errno: Option<i32>) -> Result<(), String> {
        let active = Active::parse(name, rule, errno)?;
        let mut inner = self.inner.lock().unwrap();
        match inner.rules.iter_mut().find(|a| a.name == name) {
            Some(slot) => *slot = active,
            None => inner.rules.push(active),
        }
        self.wake(&mut inner);
        Ok(())
    }

    /// Drop one rule (or all): each dropped rule's hits, counted up to its last operation
    /// (a status read before the clear would miss those in between).
    pub fn clear(&self, name: Option<&str>) -> Map<String, Value> {
        let mut inner = self.inner.lock().unwrap();
        let mut dropped = Map::new();
        inner.rules.retain(|a| {
            let drop = name.is_none_or(|n| n == a.name);
            if drop {
                dropped.insert(a.name.clone(), json!(a.hits));
            }
            !drop
        });
        self.wake(&mut inner);
        dropped
    }

    fn wake(&self, inner: &mut Inner) {
        inner.generation += 1;
        self.active.store(!inner.rules.is_empty(), Ordering::SeqCst);
        self.changed.notify_all();
    }

    pub fn any_rule(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    pub fn detached(&self) -> bool {
        self.any_rule() && self.inner.lock().unwrap().rules.iter().any(|a| a.detach)
    }

    /// Count a read or write that no rule was set for (the fast path: no lock, no allocation).
    pub fn count(&self, operation: &str) {
        if let Some(i) = DATA_OPERATIONS.iter().position(|o| *o == operation) {
            self.unruled[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Apply the rules to one operation: the errno to fail it with, or None to go ahead.
    /// Sleeps first for latency and rate caps (outside the lock).
    pub fn admit(&self, operation: &str, path: &[u8], nbytes: usize) -> Option<i32> {
        let mut inner = self.inner.lock().unwrap();
        *inner.counters.entry(operation.to_owned()).or_default() += 1;
        if inner.rules.is_empty() {
            return None;
        }
        let generation = inner.generation;
        let (mut latency, mut queued) = (0.0f64, 0.0f64);
        let mut failure = None;
        let mut detached = false;
        for active in inner.rules.iter_mut() {
            if active.detach {
                *active.hits.entry("failed").or_default() += 1;
                detached = true;
                break;
            }
            let matched = active.applies_to(operation, path);
            let (mut failed, mut delay) = (false, 0.0);
            if matched {
                delay = active.latency_s;
                latency += delay;
                failed = active.errno.is_some() && random_unit() < active.probability;
                if failed && failure.is_none() {
                    failure = active.errno;
                }
            }
            if DATA_OPERATIONS.contains(&operation) && !active.caps(operation).is_empty() {
                // Rate caps hold for the whole volume, whatever the rule's operations or path.
                let wait = active
                    .caps(operation)
                    .iter()
                    .map(|c| c.reserve(nbytes))
                    .fold(0.0, f64::max);
                queued = queued.max(wait);
                delay += wait;
            }
            for (key, hit) in [
                ("matched", matched),
                ("failed", failed),
                ("slowed", delay > 0.0),
            ] {
                *active.hits.entry(key).or_default() += hit as u64;
            }
        }
        if detached {
            *inner.counters.entry("detached".into()).or_default() += 1;
            return Some(libc::EIO);
        }
        let wait = latency + queued;
        if wait > 0.0 {
            *inner.counters.entry("delayed".into()).or_default() += 1;
            // Ends early when the rules change (a revert must not wait out a queue).
            let deadline = Instant::now() + Duration::from_secs_f64(wait);
            while inner.generation == generation {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                inner = self.changed.wait_timeout(inner, deadline - now).unwrap().0;
            }
            if inner.rules.iter().any(|a| a.detach) {
                return Some(libc::EIO);
            }
        }
        if failure.is_some() {
            *inner
                .counters
                .entry(format!("failed_{operation}"))
                .or_default() += 1;
        }
        failure
    }

    /// Rules, per-rule hits and counters, as `FaultState.snapshot()` reports them.
    pub fn snapshot(&self) -> Value {
        let inner = self.inner.lock().unwrap();
        let rules: Map<String, Value> = inner
            .rules
            .iter()
            .map(|a| (a.name.clone(), a.raw.clone()))
            .collect();
        let hits: Map<String, Value> = inner
            .rules
            .iter()
            .map(|a| (a.name.clone(), json!(a.hits)))
            .collect();
        let mut counters = inner.counters.clone();
        for (operation, unruled) in DATA_OPERATIONS.iter().zip(&self.unruled) {
            let n = unruled.load(Ordering::Relaxed);
            if n > 0 {
                *counters.entry((*operation).into()).or_default() += n;
            }
        }
        json!({"rules": rules, "rule_hits": hits, "counters": counters})
    }

    pub fn rules(&self) -> Value {
        self.snapshot()["rules"].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn globs_as_python() {
        assert!(fnmatch(b"journal/*", b"journal/WiredTigerLog.1"));
        assert!(fnmatch(b"*", b"a/b/c"));
        assert!(fnmatch(b"collection-*", b"collection-2-123.wt"));
        assert!(!fnmatch(b"collection-*", b"index-1.wt"));
        assert!(fnmatch(b"file[0-9]", b"file7"));
        assert!(!fnmatch(b"file[!0-9]", b"file7"));
        assert!(fnmatch(b"a?c", b"abc"));
        assert!(fnmatch(b"[", b"["));
        assert!(!fnmatch(b"abc", b"abcd"));
    }
}
