//! The filesystem: a passthrough to a backing directory's descriptor, faults applied.
//!
//! Every path is relative to a descriptor of the backing directory opened before the mount, so
//! the filesystem can be mounted over its own backing directory. Inode numbers are our own, one
//! per path (renames move them). Data operations consult the fault state first; metadata
//! operations only fail when the volume is detached. `READERS` threads read the kernel's
//! requests, each serving what it read, an fsync or an O_DIRECT read or write included (the
//! others read on meanwhile, as libfuse's multithreaded loop does: no hand-over to another
//! thread, which costs a wake-up on another CPU per request). While a rule is set, every
//! operation (it may sleep for latency or a rate cap) runs on a pool of workers that reply when
//! done, so a throttled file never holds up the rest of the mount.
//!
//! Passthrough (opt-in, never with unsynced-write tracking): a file opened while no rule is set
//! gets a kernel backing file, and its reads and writes go straight to the backing file. The
//! kernel offers no way to take that back, so such a file stays outside every rule set later
//! until it is closed and opened again; `status` lists these files (`passthrough_open`).

use crate::profile::Profile;
use crate::rules::FaultState;
use crate::sys;
use crate::undo::UndoLog;
use fuser::{
    AccessFlags, BackingId, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// No attribute or name caching: after a power loss the files' sizes changed under the kernel,
// and a detached volume must fail every lookup at once.
const TTL: Duration = Duration::ZERO;
const ROOT: u64 = 1;
const WORKERS: usize = 32;
/// Threads reading the kernel's requests: enough for the fsyncs and O_DIRECT reads a database
/// has in flight at once, with one left to read the next request.
pub const READERS: usize = 8;
const MAX_WRITE: u32 = 1 << 20;

struct Node {
    path: Vec<u8>,
    lookups: u64,
}

/// Our inode numbers and the paths they stand for.
struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<Vec<u8>, u64>,
    next: u64,
}

impl Inodes {
    fn new() -> Inodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                path: b".".to_vec(),
                lookups: 1,
            },
        );
        Inodes {
            nodes,
            by_path: HashMap::from([(b".".to_vec(), ROOT)]),
            next: ROOT + 1,
        }
    }

    fn path(&self, ino: u64) -> Option<Vec<u8>> {
        self.nodes.get(&ino).map(|n| n.path.clone())
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<Vec<u8>> {
        let base = &self.nodes.get(&parent)?.path;
        Some(join(base, name.as_bytes()))
    }

    /// The inode of `path`, one lookup more (a new one if the path has none).
    fn remember(&mut self, path: &[u8]) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            self.nodes.get_mut(&ino).unwrap().lookups += 1;
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                path: path.to_vec(),
                lookups: 1,
            },
        );
        self.by_path.insert(path.to_vec(), ino);
        ino
    }

    fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
            if node.lookups == 0 {
                let node = self.nodes.remove(&ino).unwrap();
                if self.by_path.get(&node.path) == Some(&ino) {
                    self.by_path.remove(&node.path);
                }
            }
        }
    }

    fn removed(&mut self, path: &[u8]) {
        self.by_path.remove(path);
    }

    /// A rename: the inode of `old` (and everything below it) moves to `new`.
    fn renamed(&mut self, old: &[u8], new: &[u8]) {
        self.by_path.remove(new);
        let mut prefix = old.to_vec();
        prefix.push(b'/');
        let moved: Vec<(Vec<u8>, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| p.as_slice() == old || p.starts_with(&prefix))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (path, ino) in moved {
            self.by_path.remove(&path);
            let mut renamed = new.to_vec();
            renamed.extend_from_slice(&path[old.len()..]);
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = renamed.clone();
            }
            self.by_path.insert(renamed, ino);
        }
    }
}

fn join(base: &[u8], name: &[u8]) -> Vec<u8> {
    if base == b"." {
        return name.to_vec();
    }
    let mut path = base.to_vec();
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn attr(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec(value: Option<TimeOrNow>) -> libc::timespec {
    match value {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: d.subsec_nanos() as i64,
            }
        }
    }
}

/// An open file: the backing descriptor, its inode, its kernel backing file if passed through,
/// and for an O_DIRECT open a second descriptor with O_DIRECT that its reads and writes use (so
/// they reach the disk as on the plain filesystem; the first one serves the rest: undo records,
/// truncation, fsync).
struct Handle {
    fd: OwnedFd,
    ino: u64,
    passthrough: Option<Arc<BackingId>>,
    direct: Option<OwnedFd>,
}

/// The O_DIRECT twin of an open with `flags`: None when the open is not O_DIRECT, or when the
/// backing filesystem refuses O_DIRECT (the file is served through its cache then).
fn direct_twin(dir: i32, path: &[u8], flags: i32) -> Option<OwnedFd> {
    if flags & libc::O_DIRECT == 0 {
        return None;
    }
    let keep = libc::O_ACCMODE | libc::O_APPEND | libc::O_DIRECT;
    sys::openat(dir, path, flags & keep, 0).ok()
}

/// How an inode's open files are served. The kernel allows one way per inode at a time (one
/// backing file for all its passthrough opens, or none passed through): an open that breaks
/// this fails with EIO, so an open follows the inode's opens still live.
#[derive(Default)]
struct InodeIo {
    backing: Weak<BackingId>,
    served: usize, // opens served by the daemon
}

/// What the workers share: everything but the request loop's own state.
pub struct Shared {
    root: OwnedFd,
    pub state: FaultState,
    pub undo: Option<UndoLog>,
    pub profile: Profile,
    inodes: Mutex<Inodes>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    io: Mutex<HashMap<u64, InodeIo>>,
    next_fh: AtomicU64,
}

type Job = Box<dyn FnOnce() + Send>;

pub struct FaultFs {
    shared: Arc<Shared>,
    passthrough: bool,
    /// How the daemon's own opens are served: without the page cache (every read() reaches
    /// the rules, whenever the file was opened) where the kernel allows mmap of such files.
    open_flags: FopenFlags,
    pool: Sender<Job>,
    /// Told once the kernel has agreed the session's terms: whether passthrough is on.
    on_ready: Option<Box<dyn FnOnce(bool) + Send + Sync>>,
}

impl Shared {
    pub fn new(root: OwnedFd, track_unsynced: bool) -> Shared {
        let undo = track_unsynced.then(|| UndoLog::new(&root));
        Shared {
            root,
            state: FaultState::default(),
            undo,
            profile: Profile::default(),
            inodes: Mutex::new(Inodes::new()),
            handles: Mutex::new(HashMap::new()),
            io: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn dir(&self) -> i32 {
        self.root.as_raw_fd()
    }

    fn path(&self, ino: u64) -> Result<Vec<u8>, i32> {
        self.inodes.lock().unwrap().path(ino).ok_or(libc::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<Vec<u8>, i32> {
        self.inodes
            .lock()
            .unwrap()
            .child(parent, name)
            .ok_or(libc::ENOENT)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>, i32> {
        self.handles
            .lock()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or(libc::EBADF)
    }

    /// Metadata operations fail only on a detached volume.
    fn metadata(&self) -> Result<(), i32> {
        if self.state.detached() {
            Err(libc::EIO)
        } else {
            Ok(())
        }
    }

    fn admit(&self, operation: &str, path: &[u8], nbytes: usize) -> Result<(), i32> {
        match self.state.admit(operation, path, nbytes) {
            Some(errno) => Err(errno),
            None => Ok(()),
        }
    }

    /// A new entry: its attributes and one more lookup of its inode.
    fn entry(&self, path: &[u8]) -> Result<FileAttr, i32> {
        let st = sys::fstatat(self.dir(), path).map_err(|e| sys::errno(&e))?;
        let ino = self.inodes.lock().unwrap().remember(path);
        Ok(attr(ino, &st))
    }

    /// Give a new file or directory to the process that created it, as a plain filesystem
    /// would (the daemon runs as root; a mongod user must own its files after unmounting).
    fn own(&self, path: &[u8], uid: u32, gid: u32) {
        if unsafe { libc::geteuid() } == 0 && (uid, gid) != (0, 0) {
            let _ = sys::fchownat(self.dir(), path, uid, gid);
        }
    }

    fn add_handle(
        &self,
        (fd, direct): (OwnedFd, Option<OwnedFd>),
        ino: u64,
        passthrough: Option<Arc<BackingId>>,
    ) -> (u64, Arc<Handle>) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(Handle {
            fd,
            ino,
            passthrough,
            direct,
        });
        self.handles.lock().unwrap().insert(fh, handle.clone());
        (fh, handle)
    }

    /// The backing file to pass an open of `ino` through, if any: the one its live
    /// passthrough opens share, else a new one when `allowed` and none of its opens is
    /// served by the daemon. Counts the open as served otherwise.
    fn io_mode(
        &self,
        ino: u64,
        allowed: bool,
        new_backing: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let mut io = self.io.lock().unwrap();
        let mode = io.entry(ino).or_default();
        let backing = match mode.backing.upgrade() {
            Some(backing) => Some(backing),
            None if allowed && mode.served == 0 => match new_backing() {
                Ok(backing) => {
                    let backing = Arc::new(backing);
                    mode.backing = Arc::downgrade(&backing);
                    Some(backing)
                }
                Err(err) => {
                    eprintln!("faultfs: passthrough refused ({err}); serving the file");
                    None
                }
            },
            None => None,
        };
        if backing.is_none() {
            mode.served += 1;
        }
        backing
    }

    fn release(&self, fh: u64) {
        let Some(handle) = self.handles.lock().unwrap().remove(&fh) else {
            return;
        };
        let ino = handle.ino;
        let mut io = self.io.lock().unwrap();
        if let Some(mode) = io.get_mut(&ino) {
            if handle.passthrough.is_none() {
                mode.served = mode.served.saturating_sub(1);
            }
            drop(handle);
            if mode.served == 0 && mode.backing.strong_count() == 0 {
                io.remove(&ino);
            }
        }
    }

    /// Paths of the files open in passthrough now (outside every rule until reopened).
    pub fn passthrough_open(&self) -> Vec<String> {
        let handles = self.handles.lock().unwrap();
        let inodes = self.inodes.lock().unwrap();
        let mut out: Vec<String> = handles
            .values()
            .filter(|h| h.passthrough.is_some())
            .filter_map(|h| inodes.path(h.ino))
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn read(&self, fh: u64, offset: i64, size: u32, ruled: bool) -> Result<Vec<u8>, i32> {
        let handle = self.handle(fh)?;
        if ruled {
            self.admit("read", &self.path(handle.ino)?, size as usize)?;
        } else {
            self.state.count("read");
        }
        let size = size as usize;
        let (mut buf, start) = match &handle.direct {
            Some(_) => sys::aligned(size),
            None => (vec![0u8; size], 0),
        };
        let fd = handle.direct.as_ref().unwrap_or(&handle.fd).as_raw_fd();
        let target = &mut buf[start..start + size];
        let n = self
            .profile
            .syscall("read", || sys::pread(fd, target, offset as u64))
            .map_err(|e| sys::errno(&e))?;
        if start > 0 {
            buf.drain(..start);
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn write(&self, fh: u64, offset: i64, data: &[u8], ruled: bool) -> Result<u32, i32> {
        let handle = self.handle(fh)?;
        let fd = handle.direct.as_ref().unwrap_or(&handle.fd).as_raw_fd();
        // O_DIRECT needs an aligned buffer; the request's data sits behind its headers.
        let copy = handle.direct.as_ref().map(|_| {
            let (mut buf, start) = sys::aligned(data.len());
            buf[start..start + data.len()].copy_from_slice(data);
            (buf, start)
        });
        let data = match &copy {
            Some((buf, start)) => &buf[*start..*start + data.len()],
            None => data,
        };
        if ruled || self.undo.is_some() {
            let path = self.path(handle.ino)?;
            if ruled {
                self.admit("write", &path, data.len())?;
            } else {
                self.state.count("write");
            }
            if let Some(undo) = &self.undo {
                let mut records = undo.lock();
                let end = offset as u64 + data.len() as u64;
                records.before_change(&path, handle.fd.as_fd(), offset as u64, end);
                return self
                    .profile
                    .syscall("write", || sys::pwrite(fd, data, offset as u64))
                    .map(|n| n as u32)
                    .map_err(|e| sys::errno(&e));
            }
        } else {
            self.state.count("write");
        }
        self.profile
            .syscall("write", || sys::pwrite(fd, data, offset as u64))
            .map(|n| n as u32)
            .map_err(|e| sys::errno(&e))
    }

    fn fsync(&self, fh: u64, datasync: bool) -> Result<(), i32> {
        let handle = self.handle(fh)?;
        let path = self.path(handle.ino)?;
        self.admit("fsync", &path, 0)?;
        self.profile
            .syscall("fsync", || sys::fsync(handle.fd.as_raw_fd(), datasync))
            .map_err(|e| sys::errno(&e))?;
        if let Some(undo) = &self.undo {
            undo.lock().synced(&path);
        }
        Ok(())
    }

    fn open(&self, ino: u64, flags: i32) -> Result<(OwnedFd, Option<OwnedFd>), i32> {
        self.metadata()?;
        let path = self.path(ino)?;
        self.admit("open", &path, 0)?;
        let direct = direct_twin(self.dir(), &path, flags);
        let flags = flags & !(libc::O_DIRECT | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        let open = || sys::openat(self.dir(), &path, flags, 0).map_err(|e| sys::errno(&e));
        let fd = match &self.undo {
            Some(undo) if flags & libc::O_TRUNC != 0 => {
                let mut records = undo.lock();
                records.before_create(&path);
                records.before_truncate_path(&path, 0);
                open()
            }
            _ => open(),
        }?;
        Ok((fd, direct))
    }

    fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> Result<(FileAttr, (OwnedFd, Option<OwnedFd>)), i32> {
        self.metadata()?;
        let path = self.child(parent, name)?;
        self.admit("open", &path, 0)?;
        if let Some(undo) = &self.undo {
            undo.lock().before_create(&path);
        }
        let asked = flags;
        let flags = libc::O_CREAT | libc::O_RDWR | (flags & (libc::O_EXCL | libc::O_APPEND));
        let fd = sys::openat(self.dir(), &path, flags, mode).map_err(|e| sys::errno(&e))?;
        self.own(&path, uid, gid);
        let direct = direct_twin(self.dir(), &path, asked & !libc::O_EXCL);
        Ok((self.entry(&path)?, (fd, direct)))
    }

    fn truncate(&self, ino: u64, fh: Option<u64>, size: u64) -> Result<(), i32> {
        let path = self.path(ino)?;
        self.admit("write", &path, 0)?;
        let _records = self.undo.as_ref().map(|undo| {
            let mut records = undo.lock();
            records.before_truncate_path(&path, size);
            records
        });
        match fh.and_then(|fh| self.handle(fh).ok()) {
            // The caller's own descriptor, unless it was opened read-only.
            Some(handle) if sys::ftruncate(handle.fd.as_raw_fd(), size).is_ok() => Ok(()),
            _ => {
                let own = sys::openat(self.dir(), &path, libc::O_WRONLY, 0)
                    .map_err(|e| sys::errno(&e))?;
                sys::ftruncate(own.as_raw_fd(), size).map_err(|e| sys::errno(&e))
            }
        }
    }

    fn fallocate(&self, fh: u64, offset: i64, length: i64, mode: i32) -> Result<(), i32> {
        let handle = self.handle(fh)?;
        let path = self.path(handle.ino)?;
        self.admit("write", &path, 0)?;
        if mode != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let _records = self.undo.as_ref().map(|undo| {
            let mut records = undo.lock();
            let end = (offset + length) as u64;
            records.before_change(&path, handle.fd.as_fd(), offset as u64, end);
            records
        });
        sys::fallocate(handle.fd.as_raw_fd(), offset, length).map_err(|e| sys::errno(&e))
    }
}

impl FaultFs {
    pub fn new(
        shared: Arc<Shared>,
        passthrough: bool,
        on_ready: impl FnOnce(bool) + Send + Sync + 'static,
    ) -> FaultFs {
        let (tx, rx) = channel::<Job>();
        let rx: Arc<Mutex<Receiver<Job>>> = Arc::new(Mutex::new(rx));
        for i in 0..WORKERS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("faultfs-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock().unwrap().recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    job();
                })
                .expect("spawning a worker thread");
        }
        // Passthrough would bypass the undo records a power loss needs.
        let passthrough = passthrough && shared.undo.is_none();
        FaultFs {
            shared,
            passthrough,
            open_flags: FopenFlags::empty(),
            pool: tx,
            on_ready: Some(Box::new(on_ready)),
        }
    }

    /// Run `job` on a worker while a rule is set (it may sleep for the rule), else on this
    /// reader.
    fn run(&self, ruled: bool, job: impl FnOnce(&Shared) + Send + 'static) {
        if ruled {
            let shared = self.shared.clone();
            let _ = self.pool.send(Box::new(move || job(&shared)));
        } else {
            job(&self.shared);
        }
    }

    fn ruled(&self) -> bool {
        self.shared.state.any_rule()
    }
}

fn reply_empty(reply: ReplyEmpty, result: Result<(), i32>) {
    match result {
        Ok(()) => reply.ok(),
        Err(errno) => reply.error(Errno::from_i32(errno)),
    }
}

fn reply_entry(reply: ReplyEntry, result: Result<FileAttr, i32>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(errno) => reply.error(Errno::from_i32(errno)),
    }
}

impl Filesystem for FaultFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        if config
            .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok()
        {
            self.open_flags =
                FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        } else {
            eprintln!("faultfs: this kernel cannot mmap uncached files; reads may hit its cache");
        }
        if self.passthrough {
            let granted = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !granted {
                eprintln!("faultfs: this kernel offers no FUSE passthrough; serving every file");
                self.passthrough = false;
            }
        }
        if let Some(on_ready) = self.on_ready.take() {
            on_ready(self.passthrough);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (s, parent) = (&self.shared, parent.0);
        reply_entry(
            reply,
            s.metadata()
                .and_then(|_| s.child(parent, name))
                .and_then(|p| s.entry(&p)),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes.lock().unwrap().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let (s, ino, fh) = (&self.shared, ino.0, fh.map(|fh| fh.0));
        // A detached volume answers nothing but its root's attributes, so that `stat` of the
        // mount point (and tools walking the mount table) never error out.
        let result = (if ino == ROOT { Ok(()) } else { s.metadata() }).and_then(|_| {
            match fh.and_then(|fh| s.handle(fh).ok()) {
                Some(h) => sys::fstat(h.fd.as_raw_fd()),
                None => sys::fstatat(s.dir(), &s.path(ino)?),
            }
            .map_err(|e| sys::errno(&e))
        });
        match result {
            Ok(st) => reply.attr(&TTL, &attr(ino, &st)),
            Err(errno) => reply.error(Errno::from_i32(errno)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (ruled, ino, fh) = (self.ruled(), ino.0, fh.map(|fh| fh.0));
        self.run(ruled, move |s| {
            let result = (|| {
                s.metadata()?;
                let path = s.path(ino)?;
                let dir = s.dir();
                let err = |e: std::io::Error| sys::errno(&e);
                if let Some(size) = size {
                    s.truncate(ino, fh, size)?;
                }
                if let Some(mode) = mode {
                    sys::fchmodat(dir, &path, mode).map_err(err)?;
                }
                if uid.is_some() || gid.is_some() {
                    sys::fchownat(dir, &path, uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))
                        .map_err(err)?;
                }
                if atime.is_some() || mtime.is_some() {
                    sys::utimensat(dir, &path, &[timespec(atime), timespec(mtime)]).map_err(err)?;
                }
                sys::fstatat(dir, &path).map_err(err)
            })();
            match result {
                Ok(st) => reply.attr(&TTL, &attr(ino, &st)),
                Err(errno) => reply.error(Errno::from_i32(errno)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let (s, ino) = (&self.shared, ino.0);
        let result = s
            .metadata()
            .and_then(|_| s.path(ino))
            .and_then(|p| sys::readlinkat(s.dir(), &p).map_err(|e| sys::errno(&e)));
        match result {
            Ok(target) => reply.data(&target),
            Err(errno) => reply.error(Errno::from_i32(errno)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let parent = parent.0;
        let s = &self.shared;
        let (uid, gid) = (req.uid(), req.gid());
        let result = s
            .metadata()
            .and_then(|_| s.child(parent, name))
            .and_then(|p| {
                sys::mkdirat(s.dir(), &p, mode & !umask).map_err(|e| sys::errno(&e))?;
                s.own(&p, uid, gid);
                s.entry(&p)
            });
        reply_entry(reply, result);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let parent = parent.0;
        let s = &self.shared;
        let (uid, gid) = (req.uid(), req.gid());
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::from_i32(libc::EPERM));
        }
        let result = s
            .metadata()
            .and_then(|_| s.child(parent, name))
            .and_then(|p| {
                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                sys::openat(s.dir(), &p, flags, mode & !umask & 0o7777)
                    .map_err(|e| sys::errno(&e))?;
                s.own(&p, uid, gid);
                s.entry(&p)
            });
        reply_entry(reply, result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = parent.0;
        let s = &self.shared;
        let result = s
            .metadata()
            .and_then(|_| s.child(parent, name))
            .and_then(|p| {
                sys::unlinkat(s.dir(), &p, 0).map_err(|e| sys::errno(&e))?;
                if let Some(undo) = &s.undo {
                    undo.lock().removed(&p);
                }
                s.inodes.lock().unwrap().removed(&p);
                Ok(())
            });
        reply_empty(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = parent.0;
        let s = &self.shared;
        let result = s
            .metadata()
            .and_then(|_| s.child(parent, name))
            .and_then(|p| {
                sys::unlinkat(s.dir(), &p, libc::AT_REMOVEDIR).map_err(|e| sys::errno(&e))?;
                s.inodes.lock().unwrap().removed(&p);
                Ok(())
            });
        reply_empty(reply, result);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let parent = parent.0;
        let s = &self.shared;
        let (uid, gid) = (req.uid(), req.gid());
        let result = s
            .metadata()
            .and_then(|_| s.child(parent, link_name))
            .and_then(|p| {
                sys::symlinkat(target.as_os_str().as_bytes(), s.dir(), &p)
                    .map_err(|e| sys::errno(&e))?;
                s.own(&p, uid, gid);
                s.entry(&p)
            });
        reply_entry(reply, result);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let parent = parent.0;
        let newparent = newparent.0;
        let flags = flags.bits();
        let s = &self.shared;
        let result = s.metadata().and_then(|_| {
            let (old, new) = (s.child(parent, name)?, s.child(newparent, newname)?);
            sys::renameat2(s.dir(), &old, &new, flags).map_err(|e| sys::errno(&e))?;
            if let Some(undo) = &s.undo {
                undo.lock().renamed(&old, &new);
            }
            s.inodes.lock().unwrap().renamed(&old, &new);
            Ok(())
        });
        reply_empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let newparent = newparent.0;
        let ino = ino.0;
        let s = &self.shared;
        let result = s.metadata().and_then(|_| {
            let (old, new) = (s.path(ino)?, s.child(newparent, newname)?);
            sys::linkat(s.dir(), &old, &new).map_err(|e| sys::errno(&e))?;
            s.entry(&new)
        });
        reply_entry(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        let flags = flags.0;
        let ruled = self.ruled();
        // A rule arriving later does not reach files already passed through: the kernel
        // cannot take a backing file back. They stay outside the rules until closed.
        let allowed = self.passthrough && !ruled;
        let open_flags = self.open_flags;
        self.run(ruled, move |s| match s.open(ino, flags) {
            Ok(fds) => {
                let allowed = allowed && !s.state.any_rule();
                let backing = s.io_mode(ino, allowed, || reply.open_backing(fds.0.as_fd()));
                let (fh, handle) = s.add_handle(fds, ino, backing);
                match &handle.passthrough {
                    Some(backing) => {
                        reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), backing)
                    }
                    None => reply.opened(FileHandle(fh), open_flags),
                }
            }
            Err(errno) => reply.error(Errno::from_i32(errno)),
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = parent.0;
        if self.passthrough {
            // The kernel then creates files with mknod and opens them with open, which
            // decides passthrough for every open alike.
            return reply.error(Errno::from_i32(libc::ENOSYS));
        }
        let (uid, gid) = (req.uid(), req.gid());
        let name = name.to_owned();
        let (ruled, open_flags) = (self.ruled(), self.open_flags);
        self.run(ruled, move |s| {
            match s.create(parent, &name, mode & !umask, flags, uid, gid) {
                Ok((attr, fds)) => {
                    s.io_mode(attr.ino.0, false, || unreachable!());
                    let (fh, _) = s.add_handle(fds, attr.ino.0, None);
                    reply.created(&TTL, &attr, Generation(0), FileHandle(fh), open_flags);
                }
                Err(errno) => reply.error(Errno::from_i32(errno)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fh = fh.0;
        let offset = offset as i64;
        let (started, ruled) = (Instant::now(), self.ruled());
        self.run(ruled, move |s| {
            match s.read(fh, offset, size, ruled) {
                Ok(data) => reply.data(&data),
                Err(errno) => reply.error(Errno::from_i32(errno)),
            }
            s.profile.served("read", started);
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let fh = fh.0;
        let offset = offset as i64;
        let (started, ruled) = (Instant::now(), self.ruled());
        let result = move |s: &Shared, r: Result<u32, i32>, reply: ReplyWrite| {
            match r {
                Ok(n) => reply.written(n),
                Err(errno) => reply.error(Errno::from_i32(errno)),
            }
            s.profile.served("write", started);
        };
        if ruled {
            let data = data.to_vec();
            self.run(true, move |s| {
                result(s, s.write(fh, offset, &data, ruled), reply)
            });
        } else {
            let s = &self.shared;
            result(s, s.write(fh, offset, data, false), reply);
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() of a duplicate descriptor: nothing is buffered here, the backing fd stays.
        reply_empty(reply, self.shared.metadata());
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        self.shared.release(fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        let started = Instant::now();
        self.run(self.ruled(), move |s| {
            reply_empty(reply, s.fsync(fh, datasync));
            s.profile.served("fsync", started);
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let ino = ino.0;
        let s = &self.shared;
        let result = s
            .metadata()
            .and_then(|_| s.path(ino))
            .and_then(|p| sys::list_dir(s.dir(), &p).map_err(|e| sys::errno(&e)));
        let entries = match result {
            Ok(entries) => entries,
            Err(errno) => return reply.error(Errno::from_i32(errno)),
        };
        let dots = [
            (b".".to_vec(), libc::DT_DIR),
            (b"..".to_vec(), libc::DT_DIR),
        ];
        for (i, (name, dtype)) in dots
            .into_iter()
            .chain(entries)
            .enumerate()
            .skip(offset as usize)
        {
            let kind = match dtype {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            // Inode numbers here are only for show: lookups assign the real ones.
            if reply.add(
                INodeNo(u64::MAX >> 1),
                (i + 1) as u64,
                kind,
                OsStr::from_bytes(&name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino.0;
        let ruled = self.ruled();
        self.run(ruled, move |s| {
            reply_empty(reply, s.path(ino).and_then(|p| s.admit("fsync", &p, 0)))
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = &self.shared;
        match s
            .metadata()
            .and_then(|_| sys::fstatvfs(s.dir()).map_err(|e| sys::errno(&e)))
        {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(errno) => reply.error(Errno::from_i32(errno)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ino = ino.0;
        let mask = mask.bits();
        let s = &self.shared;
        let result = s
            .metadata()
            .and_then(|_| s.path(ino))
            .and_then(|p| sys::faccessat(s.dir(), &p, mask).map_err(|_| libc::EACCES));
        reply_empty(reply, result);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        let offset = offset as i64;
        let length = length as i64;
        let ruled = self.ruled();
        self.run(ruled, move |s| {
            reply_empty(reply, s.fallocate(fh, offset, length, mode))
        });
    }
}
