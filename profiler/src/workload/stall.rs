//! `stall`: one long wait on a kernel lock at a known moment, by a known
//! waiter on a known holder (for tests of incident capture and blame).
//!
//! The lock is a pipe's `pipe->mutex`. `splice(2)` from a pipe to a
//! blocking AF_UNIX stream socket keeps that mutex while the send sleeps
//! (`splice_to_socket` takes `pipe_lock` and calls `sock_sendmsg` with it
//! held; before 6.5 `__splice_from_pipe` did the same), so a splice to a
//! socket nobody reads holds the mutex until the socket is drained.
//!
//! At `--stall-at` after the start:
//! 1. Lead-in (so a profiler records the holder's acquire stack, which it
//!    does for an acquisition after a wait): `stall-lead` splices the
//!    pipe's first chunk to the full socket S1 and sleeps in the send,
//!    holding the mutex; `stall-holder` splices to the full socket S2 and
//!    sleeps on the mutex; S1 is drained: the lead's send completes, the
//!    holder acquires the mutex after its wait and sleeps in its send to
//!    S2, holding it.
//! 2. The stall: `stall-waiter` writes to the pipe and sleeps on the
//!    mutex. `--stall-ms` after it is seen asleep, S2 is drained: the
//!    holder's splice completes and releases the mutex, and the write
//!    goes through.
//!
//! Every "until" is a poll of the thread's state in /proc (never a fixed
//! sleep) with a generous deadline; a step that never happens ends the
//! run with an error naming it. Then one line is reported (see [`Stall`])
//! and the run idles until its end, its threads alive (so their ids stay
//! theirs) but idle.

use std::{
    fs::File,
    io::{self, Read as _, Write as _},
    os::unix::net::UnixStream,
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    thread::{self, Scope},
    time::{Duration, Instant},
};

use super::syscalls;

/// Options only the `stall` scenario reads.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct StallOptions {
    /// How long the holder keeps the mutex once the waiter is seen asleep on it.
    pub stall: Duration,
    /// When the lead-in starts, after the run starts (the stall follows it
    /// within milliseconds).
    pub at: Duration,
}

impl Default for StallOptions {
    fn default() -> StallOptions {
        StallOptions { stall: Duration::from_millis(200), at: Duration::from_secs(3) }
    }
}

/// What a stall was, printed (by `lockprof stress stall`) as one line:
///
/// `stall waiter <tid> holder <tid> lead <tid> pid <pid> wait_ms <ms> at_monotonic_ns <ns> stall_ms <ms>`
///
/// `wait_ms` (three decimals) is the waiter's `write` as measured around
/// the call, an upper bound of its wait on the mutex; `at_monotonic_ns`
/// (CLOCK_MONOTONIC, the clock of kernel trace timestamps) is just before
/// the call, so the wait lies within `at_monotonic_ns` plus `wait_ms`.
/// `stall_ms` is the `--stall-ms` asked for; `wait_ms` is at least that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The process.
    pub pid: u32,
    /// The thread that waited on the pipe mutex (`stall-waiter`).
    pub waiter: u32,
    /// The thread that held it meanwhile (`stall-holder`).
    pub holder: u32,
    /// The thread that held it before the holder (`stall-lead`).
    pub lead: u32,
    /// The waiter's blocked `write`, in nanoseconds.
    pub wait_ns: u64,
    /// CLOCK_MONOTONIC just before the waiter's `write`.
    pub at_monotonic_ns: u64,
    /// The stall asked for.
    pub stall: Duration,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stall waiter {} holder {} lead {} pid {} wait_ms {:.3} at_monotonic_ns {} stall_ms {}",
            self.waiter,
            self.holder,
            self.lead,
            self.pid,
            self.wait_ns as f64 / 1e6,
            self.at_monotonic_ns,
            self.stall.as_millis()
        )
    }
}

/// How long any one step may take before the run gives up on it.
const PATIENCE: Duration = Duration::from_secs(10);

/// How often a step's progress is polled.
const POLL: Duration = Duration::from_millis(1);

/// Bytes of each of the two chunks the pipe holds for the lead and the holder.
const CHUNK: usize = 4096;

/// Bytes the waiter writes (room for them in the pipe: only the mutex stops it).
const WRITE: usize = 512;

/// One of the workload's threads, as the coordinator sees it.
#[derive(Default)]
struct Actor {
    /// Its thread id, once it runs (0 before).
    tid: AtomicU32,
    /// What its system call returned, once it has.
    outcome: OnceLock<io::Result<usize>>,
}

impl Actor {
    fn returned(&self) -> bool {
        self.outcome.get().is_some()
    }
}

/// The pipe and the two sockets: `(sender, receiver)` pairs whose senders
/// are full (a send sleeps until the receiver is drained).
struct Rig {
    rd: File,
    wr: File,
    s1: (UnixStream, UnixStream),
    s2: (UnixStream, UnixStream),
}

impl Rig {
    fn new() -> io::Result<Rig> {
        let (rd, wr) = syscalls::pipe()?;
        for _ in 0..2 {
            if syscalls::write(&wr, &[b's'; CHUNK])? != CHUNK {
                return Err(io::Error::other("stall: a short write to the empty pipe"));
            }
        }
        let rig = Rig { rd, wr, s1: UnixStream::pair()?, s2: UnixStream::pair()? };
        fill(&rig.s1.0)?;
        fill(&rig.s2.0)?;
        rig.s1.1.set_nonblocking(true)?;
        rig.s2.1.set_nonblocking(true)?;
        Ok(rig)
    }

    /// Ends every send (the receivers shut down): whatever sleeps in one
    /// returns, so every thread can be joined after a failed step.
    fn unblock(&self) {
        let _ = self.s1.1.shutdown(std::net::Shutdown::Both);
        let _ = self.s2.1.shutdown(std::net::Shutdown::Both);
    }
}

/// Sends until the socket is full, leaving it blocking.
fn fill(s: &UnixStream) -> io::Result<()> {
    s.set_nonblocking(true)?;
    let buf = [b'f'; 1 << 16];
    loop {
        match (&*s).write(&buf) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    s.set_nonblocking(false)
}

/// Reads all a (nonblocking) receiver holds.
fn drain(s: &UnixStream) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// A thread's scheduler state (`R`, `S`, `D`...) and the system call it
/// is in (`None`: running, or not in one), from /proc.
fn task_state(tid: u32) -> io::Result<(char, Option<libc::c_long>)> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    // The state follows the command name, which is in parentheses.
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap_or('?');
    let sys = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))?;
    let nr = sys.split_whitespace().next().and_then(|w| w.parse::<libc::c_long>().ok()).filter(|n| *n >= 0);
    Ok((state, nr))
}

/// How a thread looks, for an error message.
fn describe(name: &str, a: &Actor) -> String {
    let tid = a.tid.load(Ordering::Relaxed);
    let state = task_state(tid).map(|(s, n)| format!("state {s}, syscall {n:?}")).unwrap_or_else(|e| e.to_string());
    let wchan = std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan")).unwrap_or_default();
    format!("{name} (tid {tid}: {state}, wchan {wchan:?}, returned {:?})", a.outcome.get())
}

/// Why the sequence did not go on.
enum Halt {
    /// SIGINT/SIGTERM: not an error.
    Stopped,
    /// A step failed.
    Failed(io::Error),
}

impl From<io::Error> for Halt {
    fn from(e: io::Error) -> Halt {
        Halt::Failed(e)
    }
}

fn failed(step: &str, why: String) -> Halt {
    Halt::Failed(io::Error::other(format!("stall: {step}: {why}")))
}

/// Polls `ready` until it says yes (`Some(true)`), says the step failed
/// (`Err`), `stop` is set or [`PATIENCE`] passes.
fn until(
    step: &str,
    stop: &AtomicBool,
    mut ready: impl FnMut() -> Result<bool, Halt>,
    why: impl Fn() -> String,
) -> Result<(), Halt> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if ready()? {
            return Ok(());
        }
        if stop.load(Ordering::Relaxed) {
            return Err(Halt::Stopped);
        }
        if Instant::now() >= deadline {
            return Err(failed(step, format!("not after {} s: {}", PATIENCE.as_secs(), why())));
        }
        thread::sleep(POLL);
    }
}

/// Whether `a` sleeps (`state`: `S` in a send, `D` on the mutex) in the
/// system call `nr`; a failure if its call has already returned.
fn asleep_in(step: &str, name: &str, a: &Actor, state: char, nr: libc::c_long) -> Result<bool, Halt> {
    if a.returned() {
        return Err(failed(step, format!("the kernel did not block it: {}", describe(name, a))));
    }
    let tid = a.tid.load(Ordering::Relaxed);
    Ok(tid != 0 && task_state(tid)? == (state, Some(nr)))
}

/// Sleeps `d`, or until `stop` is set; whether it slept all of it.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= until {
            return true;
        }
        thread::sleep((until - now).min(Duration::from_millis(10)));
    }
    false
}

/// The coordinator's view of the three threads, and the flag that lets them go.
#[derive(Default)]
struct Cast {
    lead: Actor,
    holder: Actor,
    waiter: Actor,
    /// The waiter's `write`: CLOCK_MONOTONIC before and after.
    write_ns: (AtomicU64, AtomicU64),
    /// Set when the threads may end.
    release: AtomicBool,
}

/// Starts a thread named `name` that runs `call` as `actor`, then idles
/// until released.
fn start<'s>(
    s: &'s Scope<'s, '_>,
    name: &str,
    cast: &'s Cast,
    actor: &'s Actor,
    call: impl FnOnce() -> io::Result<usize> + Send + 's,
) -> io::Result<()> {
    thread::Builder::new().name(name.into()).spawn_scoped(s, move || {
        actor.tid.store(syscalls::gettid(), Ordering::Relaxed);
        let _ = actor.outcome.set(call());
        while !cast.release.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(10));
        }
    })?;
    Ok(())
}

/// Steps 1 and 2 of the module's description: the stall's facts.
fn sequence<'s>(
    s: &'s Scope<'s, '_>,
    rig: &'s Rig,
    cast: &'s Cast,
    opts: StallOptions,
    stop: &AtomicBool,
) -> Result<Stall, Halt> {
    const SPLICE: libc::c_long = libc::SYS_splice;
    const WRITE_NR: libc::c_long = libc::SYS_write;
    start(s, "stall-lead", cast, &cast.lead, || syscalls::splice(&rig.rd, &rig.s1.0, CHUNK))?;
    let step = "stall-lead sleeping in its splice to a full socket, holding the pipe mutex";
    until(
        step,
        stop,
        || asleep_in(step, "stall-lead", &cast.lead, 'S', SPLICE),
        || describe("stall-lead", &cast.lead),
    )?;
    start(s, "stall-holder", cast, &cast.holder, || syscalls::splice(&rig.rd, &rig.s2.0, CHUNK))?;
    let step = "stall-holder sleeping on the pipe mutex in its splice";
    until(
        step,
        stop,
        || asleep_in(step, "stall-holder", &cast.holder, 'D', SPLICE),
        || describe("stall-holder", &cast.holder),
    )?;
    let step = "stall-lead's splice returning once its socket is drained";
    until(
        step,
        stop,
        || {
            drain(&rig.s1.1)?;
            Ok(cast.lead.returned())
        },
        || describe("stall-lead", &cast.lead),
    )?;
    if let Some(Err(e)) = cast.lead.outcome.get() {
        return Err(failed(step, format!("it failed: {e}")));
    }
    let step = "stall-holder sleeping in its splice to a full socket, holding the pipe mutex";
    until(
        step,
        stop,
        || asleep_in(step, "stall-holder", &cast.holder, 'S', SPLICE),
        || describe("stall-holder", &cast.holder),
    )?;
    start(s, "stall-waiter", cast, &cast.waiter, || {
        cast.write_ns.0.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
        let r = syscalls::write(&rig.wr, &[b'w'; WRITE]);
        cast.write_ns.1.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
        r
    })?;
    let step = "stall-waiter sleeping on the pipe mutex in its write";
    until(
        step,
        stop,
        || asleep_in(step, "stall-waiter", &cast.waiter, 'D', WRITE_NR),
        || describe("stall-waiter", &cast.waiter),
    )?;
    if !sleep_unless_stopped(opts.stall, stop) {
        return Err(Halt::Stopped);
    }
    let step = "stall-holder's splice and stall-waiter's write returning once the holder's socket is drained";
    until(
        step,
        stop,
        || {
            drain(&rig.s2.1)?;
            Ok(cast.holder.returned() && cast.waiter.returned())
        },
        || format!("{}; {}", describe("stall-holder", &cast.holder), describe("stall-waiter", &cast.waiter)),
    )?;
    for (name, a) in [("stall-holder", &cast.holder), ("stall-waiter", &cast.waiter)] {
        if let Some(Err(e)) = a.outcome.get() {
            return Err(failed(step, format!("{name}'s call failed: {e}")));
        }
    }
    let (before, after) = (cast.write_ns.0.load(Ordering::Relaxed), cast.write_ns.1.load(Ordering::Relaxed));
    Ok(Stall {
        pid: std::process::id(),
        waiter: cast.waiter.tid.load(Ordering::Relaxed),
        holder: cast.holder.tid.load(Ordering::Relaxed),
        lead: cast.lead.tid.load(Ordering::Relaxed),
        wait_ns: after.saturating_sub(before),
        at_monotonic_ns: before,
        stall: opts.stall,
    })
}

/// Runs the stall `opts.at` after `start`, reports it, then idles until
/// `deadline` (or returns at once if that has passed) or `stop`. The
/// stalls made: 1, or 0 when stopped first.
pub(super) fn run(
    opts: StallOptions,
    start: Instant,
    deadline: Instant,
    stop: &AtomicBool,
    report: &mut dyn FnMut(&Stall),
) -> io::Result<u64> {
    if !sleep_unless_stopped((start + opts.at).saturating_duration_since(Instant::now()), stop) {
        return Ok(0);
    }
    let rig = Rig::new()?;
    let cast = Cast::default();
    let done = thread::scope(|s| {
        let r = sequence(s, &rig, &cast, opts, stop);
        match &r {
            Ok(stall) => {
                report(stall);
                sleep_unless_stopped(deadline.saturating_duration_since(Instant::now()), stop);
            }
            Err(_) => rig.unblock(),
        }
        cast.release.store(true, Ordering::Relaxed);
        r
    });
    match done {
        Ok(_) => Ok(1),
        Err(Halt::Stopped) => Ok(0),
        Err(Halt::Failed(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, atomic::AtomicBool},
        time::Duration,
    };

    use super::{Stall, StallOptions};
    use crate::workload::{Workload, run_with};

    #[test]
    fn the_line_names_every_fact() {
        let s = Stall {
            pid: 10,
            waiter: 13,
            holder: 12,
            lead: 11,
            wait_ns: 203_456_789,
            at_monotonic_ns: 5_000_000_123,
            stall: Duration::from_millis(200),
        };
        assert_eq!(
            s.to_string(),
            "stall waiter 13 holder 12 lead 11 pid 10 wait_ms 203.457 at_monotonic_ns 5000000123 stall_ms 200"
        );
    }

    /// The waiter's wait covers the stall asked for; the three threads are
    /// distinct threads of this process, alive and named when reported.
    #[test]
    fn the_waiter_waits_at_least_the_stall() {
        let opts = StallOptions { stall: Duration::from_millis(150), at: Duration::from_millis(200) };
        let mut seen = Vec::new();
        let out = run_with(
            Workload::Stall,
            1,
            Duration::from_millis(300),
            opts,
            &mut |s: &Stall| {
                let comms: Vec<String> = [s.waiter, s.holder, s.lead]
                    .iter()
                    .map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/comm")).unwrap_or_default())
                    .collect();
                seen.push((s.clone(), comms));
            },
            Arc::new(AtomicBool::new(false)),
        )
        .expect("the stall runs");
        assert_eq!(out.ops, 1, "one stall");
        let [(s, comms)] = &seen[..] else { panic!("one stall reported: {seen:?}") };
        assert!(s.wait_ns >= 150_000_000, "waited {} ns, less than the 150 ms stall", s.wait_ns);
        assert_eq!(s.pid, std::process::id());
        assert_eq!(comms, &["stall-waiter\n", "stall-holder\n", "stall-lead\n"], "{s}");
        assert!(s.at_monotonic_ns > 0, "{s}");
    }
}
