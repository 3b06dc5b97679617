//! Thin wrappers over the `*at` system calls the filesystem makes relative to its backing
//! directory's descriptor: byte-string paths in, `io::Result` out (errno kept for the reply).

use std::ffi::CString;
use std::io::{Error, Result};
use std::os::fd::{FromRawFd, OwnedFd};

fn cstr(path: &[u8]) -> Result<CString> {
    CString::new(path).map_err(|_| Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> Result<()> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_size(ret: libc::ssize_t) -> Result<usize> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

pub fn errno(err: &Error) -> i32 {
    err.raw_os_error().unwrap_or(libc::EIO)
}

pub fn openat(dir: i32, path: &[u8], flags: i32, mode: u32) -> Result<OwnedFd> {
    let p = cstr(path)?;
    let fd = unsafe { libc::openat(dir, p.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn fstatat(dir: i32, path: &[u8]) -> Result<libc::stat> {
    let p = cstr(path)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatat(dir, p.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn fstat(fd: i32) -> Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

pub fn pread(fd: i32, buf: &mut [u8], offset: u64) -> Result<usize> {
    check_size(unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as i64) })
}

/// A buffer with `size` bytes at a 4 KiB-aligned start (the start's index returned), as
/// O_DIRECT demands of the memory it reads into or writes from.
pub fn aligned(size: usize) -> (Vec<u8>, usize) {
    const ALIGN: usize = 4096;
    let buf = vec![0u8; size + ALIGN];
    let start = buf.as_ptr().align_offset(ALIGN);
    (buf, start)
}

pub fn pwrite(fd: i32, buf: &[u8], offset: u64) -> Result<usize> {
    check_size(unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), offset as i64) })
}

pub fn fsync(fd: i32, datasync: bool) -> Result<()> {
    check(unsafe {
        if datasync {
            libc::fdatasync(fd)
        } else {
            libc::fsync(fd)
        }
    })
}

pub fn ftruncate(fd: i32, length: u64) -> Result<()> {
    check(unsafe { libc::ftruncate(fd, length as i64) })
}

pub fn fallocate(fd: i32, offset: i64, length: i64) -> Result<()> {
    match unsafe { libc::posix_fallocate(fd, offset, length) } {
        0 => Ok(()),
        err => Err(Error::from_raw_os_error(err)),
    }
}

pub fn unlinkat(dir: i32, path: &[u8], flags: i32) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::unlinkat(dir, p.as_ptr(), flags) })
}

pub fn mkdirat(dir: i32, path: &[u8], mode: u32) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::mkdirat(dir, p.as_ptr(), mode) })
}

pub fn symlinkat(target: &[u8], dir: i32, path: &[u8]) -> Result<()> {
    let (t, p) = (cstr(target)?, cstr(path)?);
    check(unsafe { libc::symlinkat(t.as_ptr(), dir, p.as_ptr()) })
}

pub fn linkat(dir: i32, old: &[u8], new: &[u8]) -> Result<()> {
    let (o, n) = (cstr(old)?, cstr(new)?);
    check(unsafe { libc::linkat(dir, o.as_ptr(), dir, n.as_ptr(), 0) })
}

pub fn renameat2(dir: i32, old: &[u8], new: &[u8], flags: u32) -> Result<()> {
    let (o, n) = (cstr(old)?, cstr(new)?);
    check(unsafe { libc::renameat2(dir, o.as_ptr(), dir, n.as_ptr(), flags) })
}

pub fn readlinkat(dir: i32, path: &[u8]) -> Result<Vec<u8>> {
    let p = cstr(path)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let n = check_size(unsafe {
        libc::readlinkat(dir, p.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
    })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn fchmodat(dir: i32, path: &[u8], mode: u32) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::fchmodat(dir, p.as_ptr(), mode & 0o7777, 0) })
}

pub fn fchownat(dir: i32, path: &[u8], uid: u32, gid: u32) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::fchownat(dir, p.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
}

pub fn utimensat(dir: i32, path: &[u8], times: &[libc::timespec; 2]) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::utimensat(dir, p.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
}

pub fn faccessat(dir: i32, path: &[u8], mode: i32) -> Result<()> {
    let p = cstr(path)?;
    check(unsafe { libc::faccessat(dir, p.as_ptr(), mode, 0) })
}

pub fn fstatvfs(fd: i32) -> Result<libc::statvfs> {
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatvfs(fd, &mut st) })?;
    Ok(st)
}

/// Names in a directory (without `.` and `..`).
pub fn list_dir(dir: i32, path: &[u8]) -> Result<Vec<(Vec<u8>, u8)>> {
    let fd = openat(dir, path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let err = Error::last_os_error();
        unsafe { libc::close(raw) };
        return Err(err);
    }
    let mut out = Vec::new();
    loop {
        let entry = unsafe { libc::readdir64(stream) };
        if entry.is_null() {
            break;
        }
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            out.push((name.to_vec(), unsafe { (*entry).d_type }));
        }
    }
    unsafe { libc::closedir(stream) };
    Ok(out)
}
