//! `rsdrill-faultfs SOURCE MOUNTPOINT [--track-unsynced] [--passthrough]`: the compiled data
//! path of rsdrill's fault-injecting filesystem.
//!
//! Started by the Python daemon (`python -m rsdrill.faultfs serve`), which keeps the control
//! socket, its peer-credential check and the rule validation, and forwards the validated
//! requests here: one JSON object per line on stdin, one reply per line on stdout. The first
//! line on stdout says the mount is up. Dies with its parent (PR_SET_PDEATHSIG), as the Python
//! layer's mount dies with its daemon; SIGTERM/SIGINT unmount lazily (open files stay served).

mod fs;
mod profile;
mod rules;
mod sys;
mod undo;

use fs::{FaultFs, Shared, READERS};
use fuser::{Config, MountOption, Session, SessionACL};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::os::fd::OwnedFd;
use std::process::{exit, Command};
use std::sync::Arc;

const FSNAME: &str = "rsdrill-faultfs";

fn answer(shared: &Shared, request: &Value) -> Result<Value, String> {
    let state = &shared.state;
    match request["op"].as_str().unwrap_or("") {
        "set" => {
            let name = request["name"].as_str().ok_or("set: no name")?;
            let errno = request["errno"].as_i64().map(|e| e as i32);
            state.set_rule(name, &request["rule"], errno)?;
            Ok(json!({"rules": state.rules()}))
        }
        "clear" => {
            let hits = state.clear(request["name"].as_str());
            let names: Vec<&String> = hits.keys().collect();
            Ok(json!({"cleared": names, "rule_hits": hits}))
        }
        "status" => {
            let mut status = state.snapshot();
            status["unsynced"] = shared.undo.as_ref().map_or(Value::Null, |u| u.pending());
            status["passthrough_open"] = json!(shared.passthrough_open());
            status["profile"] = shared.profile.snapshot();
            Ok(status)
        }
        "power-loss" => match &shared.undo {
            Some(undo) => Ok(json!({"undone": undo.power_loss()})),
            None => Err("power loss needs a mount started with unsynced-write tracking".into()),
        },
        other => Err(format!("unknown op {other:?}")),
    }
}

/// Serve the Python side's requests until it closes our stdin.
fn control(shared: Arc<Shared>) {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(request) => match answer(&shared, &request) {
                Ok(Value::Object(mut body)) => {
                    body.insert("ok".into(), Value::Bool(true));
                    Value::Object(body)
                }
                Ok(other) => json!({"ok": true, "value": other}),
                Err(error) => json!({"ok": false, "error": error}),
            },
            Err(err) => json!({"ok": false, "error": format!("bad request: {err}")}),
        };
        if writeln!(stdout, "{reply}")
            .and_then(|_| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}

/// Block SIGTERM/SIGINT in every thread; one thread waits for them and unmounts lazily.
fn handle_signals(mountpoint: String) {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        std::thread::spawn(move || {
            let mut signal = 0;
            libc::sigwait(&set, &mut signal);
            eprintln!("faultfs: signal {signal}: unmounting {mountpoint}");
            let _ = Command::new("fusermount3")
                .args(["-u", "-z", &mountpoint])
                .status();
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags: Vec<&str> = args
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let unknown: Vec<&&str> = flags
        .iter()
        .filter(|f| !["--track-unsynced", "--passthrough"].contains(f))
        .collect();
    if paths.len() != 2 || !unknown.is_empty() {
        eprintln!("usage: rsdrill-faultfs SOURCE MOUNTPOINT [--track-unsynced] [--passthrough]");
        exit(2);
    }
    let (source, mountpoint) = (paths[0].clone(), paths[1].clone());
    let track_unsynced = flags.contains(&"--track-unsynced");
    let passthrough = flags.contains(&"--passthrough");
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // Opened before mounting: the backing directory stays reachable under the mount.
    let root: OwnedFd = match sys::openat(
        libc::AT_FDCWD,
        source.as_bytes(),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    ) {
        Ok(fd) => fd,
        Err(err) => {
            eprintln!("faultfs: {source}: {err}");
            exit(1);
        }
    };
    handle_signals(mountpoint.clone());
    let shared = Arc::new(Shared::new(root, track_unsynced));
    let mut options = Config::default();
    options.mount_options = vec![
        MountOption::FSName(FSNAME.into()),
        // A kernel option, not `Subtype`: mounting as root, fuser calls mount(2) itself and
        // would drop it, and the mount table must say `fuse.rsdrill-faultfs`.
        MountOption::CUSTOM(format!("subtype={FSNAME}")),
    ];
    options.acl = SessionACL::All; // allow_other: the members may run as another user
    options.n_threads = Some(READERS);
    options.clone_fd = true;
    let control_shared = shared.clone();
    let ready = move |passthrough: bool| {
        println!(
            "{}",
            json!({"ok": true, "mounted": mountpoint, "passthrough": passthrough})
        );
        std::thread::spawn(move || control(control_shared));
    };
    let filesystem = FaultFs::new(shared, passthrough, ready);
    let session = match Session::new(filesystem, paths[1], &options) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("faultfs: mounting {}: {err}", paths[1]);
            exit(1);
        }
    };
    if let Err(err) = session.run() {
        eprintln!("faultfs: {err}");
        exit(1);
    }
}
