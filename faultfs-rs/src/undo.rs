//! Power loss: undo records of what was written since each file's last fsync.
//!
//! Same semantics as `rsdrill/faultfs/undo.py`: before a write, truncate or create reaches a
//! backing file, the synced bytes it is about to change are saved (once per byte between two
//! fsyncs); an fsync drops the file's record; `power_loss()` puts every file back as it was at
//! its last fsync. The filesystem holds `lock()` around a change and its record, and a power
//! loss holds it for the whole restore, so a write is undone whole or not at all.

use crate::sys;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

/// One file's state at its last fsync, saved piecewise as it gets overwritten.
struct FileUndo {
    created: bool,
    size: u64,
    saved: Vec<(u64, Vec<u8>)>, // sorted, disjoint (start, bytes)
}

impl FileUndo {
    /// Parts of [start, end) within the synced size that are not saved yet.
    fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let end = end.min(self.size);
        let mut out = Vec::new();
        let mut position = start;
        let first = self
            .saved
            .partition_point(|(s, _)| *s <= start)
            .saturating_sub(1);
        for (s, chunk) in &self.saved[first..] {
            if position >= end {
                break;
            }
            let e = s + chunk.len() as u64;
            if e <= position {
                continue;
            }
            if *s >= end {
                break;
            }
            if *s > position {
                out.push((position, *s));
            }
            position = position.max(e);
        }
        if position < end {
            out.push((position, end));
        }
        out
    }

    fn save(&mut self, start: u64, data: Vec<u8>) {
        let at = self.saved.partition_point(|(s, _)| *s < start);
        self.saved.insert(at, (start, data));
    }

    fn saved_bytes(&self) -> u64 {
        self.saved.iter().map(|(_, c)| c.len() as u64).sum()
    }
}

pub struct Records {
    root: i32,
    files: HashMap<Vec<u8>, FileUndo>,
}

/// Undo records of every file of one backing directory, keyed by relative path.
pub struct UndoLog {
    records: Mutex<Records>,
}

impl UndoLog {
    pub fn new(root: &OwnedFd) -> UndoLog {
        UndoLog {
            records: Mutex::new(Records {
                root: root.as_raw_fd(),
                files: HashMap::new(),
            }),
        }
    }

    /// Held around a change and its record (see the module's doc).
    pub fn lock(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap()
    }

    pub fn pending(&self) -> Value {
        let records = self.lock();
        let map: Map<String, Value> = records
            .files
            .iter()
            .map(|(p, r)| {
                let n = if r.created {
                    -1
                } else {
                    r.saved_bytes() as i64
                };
                (String::from_utf8_lossy(p).into_owned(), Value::from(n))
            })
            .collect();
        Value::Object(map)
    }

    /// Put every file back as it was at its last fsync; per file, the bytes dropped (-1: a file
    /// created since and removed now).
    pub fn power_loss(&self) -> Value {
        let mut records = self.lock();
        let root = records.root;
        let files = std::mem::take(&mut records.files);
        let mut out = Map::new();
        for (path, record) in files {
            if let Some(n) = restore(root, &path, &record) {
                out.insert(String::from_utf8_lossy(&path).into_owned(), Value::from(n));
            }
        }
        Value::Object(out)
    }
}

fn restore(root: i32, path: &[u8], record: &FileUndo) -> Option<i64> {
    if record.created {
        return sys::unlinkat(root, path, 0).ok().map(|_| -1);
    }
    let fd = sys::openat(root, path, libc::O_WRONLY, 0).ok()?;
    let size = sys::fstat(fd.as_raw_fd())
        .map(|st| st.st_size as u64)
        .unwrap_or(record.size);
    let grown = size.saturating_sub(record.size);
    let _ = sys::ftruncate(fd.as_raw_fd(), record.size);
    for (start, chunk) in &record.saved {
        let _ = sys::pwrite(fd.as_raw_fd(), chunk, *start);
    }
    let _ = sys::fsync(fd.as_raw_fd(), false);
    Some((record.saved_bytes() + grown) as i64)
}

impl Records {
    fn record(&mut self, path: &[u8]) -> &mut FileUndo {
        let root = self.root;
        self.files
            .entry(path.to_vec())
            .or_insert_with(|| match sys::fstatat(root, path) {
                Ok(st) => FileUndo {
                    created: false,
                    size: st.st_size as u64,
                    saved: Vec::new(),
                },
                Err(_) => FileUndo {
                    created: true,
                    size: 0,
                    saved: Vec::new(),
                },
            })
    }

    pub fn before_create(&mut self, path: &[u8]) {
        self.record(path);
    }

    /// Save the synced bytes in [start, end) of the file open as `fd` before they change.
    pub fn before_change(&mut self, path: &[u8], fd: BorrowedFd<'_>, start: u64, end: u64) {
        let root = self.root;
        let record = self.record(path);
        for (gap_start, gap_end) in record.gaps(start, end) {
            let mut data = vec![0u8; (gap_end - gap_start) as usize];
            let n = match sys::pread(fd.as_raw_fd(), &mut data, gap_start) {
                Ok(n) => n,
                // Opened write-only: read through a descriptor of our own.
                Err(_) => sys::openat(root, path, libc::O_RDONLY, 0)
                    .and_then(|own| sys::pread(own.as_raw_fd(), &mut data, gap_start))
                    .unwrap_or(0),
            };
            data.truncate(n);
            record.save(gap_start, data);
        }
    }

    /// Save what truncating the file at `path` to `length` would drop (if it exists).
    pub fn before_truncate_path(&mut self, path: &[u8], length: u64) {
        if let Ok(fd) = sys::openat(self.root, path, libc::O_RDONLY, 0) {
            self.before_change(path, fd.as_fd(), length, 1 << 62);
        }
    }

    pub fn synced(&mut self, path: &[u8]) {
        self.files.remove(path);
    }

    pub fn renamed(&mut self, old: &[u8], new: &[u8]) {
        let record = self.files.remove(old);
        self.files.remove(new);
        if let Some(record) = record {
            self.files.insert(new.to_vec(), record);
        }
    }

    pub fn removed(&mut self, path: &[u8]) {
        self.files.remove(path);
    }
}
