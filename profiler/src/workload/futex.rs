//! User-space locks (futexes): threads contending on process-wide glibc
//! and Rust mutexes (`futex`), on a glibc priority-inheritance mutex
//! (`futex-pi`), and a producer/consumer queue whose consumers idle on a
//! condition variable (`condvar`: futex waits that are not contention).
//!
//! Each lock is a static with a plain ELF data symbol (`lockprof_stress_*`),
//! so a profile can name it, and is taken by an `#[inline(never)]` function
//! named for it, so a waiter's user stack passes through that name. Every
//! acquisition tries the lock first; one whose try fails is counted as
//! contended before the blocking lock. The counts are kept under the lock
//! itself (no extra shared cache line) and reported as [`Count`]s.

use std::{
    cell::UnsafeCell,
    hint::black_box,
    sync::{
        Arc, Mutex, OnceLock, PoisonError, TryLockError,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use super::{
    Count, CountKind,
    crew::{Crew, Step},
};

/// 64-bit words of data each lock protects: four cache lines, touched by
/// every holder.
const SHELF: usize = 32;

/// Spin iterations inside a critical section, after touching the shelf
/// (a few microseconds in a release build: long enough that a waiter
/// usually finds the lock still held when its futex wait starts).
const HOLD_SPIN: u32 = 8000;

/// Spin iterations between two acquisitions: less than the hold, so a
/// lock is busy most of the time.
const AWAY_SPIN: u32 = 3000;

/// How long a consumer waits on the condition variable before it looks at
/// the end of the run again.
const CONSUMER_TIMEOUT: Duration = Duration::from_millis(10);

/// Pause of the producer between two items: consumers spend most of their
/// time waiting on the condition variable.
const PRODUCER_PAUSE: Duration = Duration::from_micros(50);

/// Data a lock protects.
type Shelf = [AtomicU64; SHELF];

/// A glibc mutex in a static, with the data it protects. The futex word
/// (`__lock`) is at the static's address, `__owner` at offset 8.
#[repr(C)]
pub struct GlibcLock {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    shelf: Shelf,
}

// SAFETY: the pthread mutex is made to be shared between threads and is
// only reached through pthread calls on its address; the shelf is atomics.
unsafe impl Sync for GlibcLock {}

impl GlibcLock {
    const fn new() -> GlibcLock {
        GlibcLock {
            mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            shelf: [const { AtomicU64::new(0) }; SHELF],
        }
    }

    fn raw(&self) -> *mut libc::pthread_mutex_t {
        self.mutex.get()
    }
}

/// The `futex` workload's glibc mutex (default type, `PTHREAD_MUTEX_INITIALIZER`).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static lockprof_stress_mutex: GlibcLock = GlibcLock::new();

/// The `futex` workload's Rust mutex (std's futex mutex).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static lockprof_stress_std_mutex: Mutex<Shelf> = Mutex::new([const { AtomicU64::new(0) }; SHELF]);

/// The `futex-pi` workload's mutex: priority inheritance
/// (`PTHREAD_PRIO_INHERIT`, so `FUTEX_LOCK_PI`), set up once by [`pi_ready`].
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static lockprof_stress_pi_mutex: GlibcLock = GlibcLock::new();

/// The `condvar` workload's mutex, guarding its queue.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static lockprof_stress_cond_mutex: GlibcLock = GlibcLock::new();

/// A glibc condition variable in a static.
#[repr(transparent)]
pub struct GlibcCond(UnsafeCell<libc::pthread_cond_t>);

// SAFETY: the condition variable is made to be shared between threads and
// is only reached through pthread calls on its address.
unsafe impl Sync for GlibcCond {}

/// The `condvar` workload's condition variable: "the queue has items".
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static lockprof_stress_cond: GlibcCond = GlibcCond(UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER));

/// Symbol names, as printed in the counts (and found in the ELF symbol table).
const GLIBC_MUTEX: &str = "lockprof_stress_mutex";
const STD_MUTEX: &str = "lockprof_stress_std_mutex";
const PI_MUTEX: &str = "lockprof_stress_pi_mutex";
const COND_MUTEX: &str = "lockprof_stress_cond_mutex";
const COND: &str = "lockprof_stress_cond";

/// One count a run keeps, added to while holding the lock it is about.
pub(super) struct Tally {
    kind: CountKind,
    symbol: &'static str,
    n: AtomicU64,
}

impl Tally {
    fn new(kind: CountKind, symbol: &'static str) -> Arc<Tally> {
        Arc::new(Tally { kind, symbol, n: AtomicU64::new(0) })
    }

    fn add(&self) {
        // Under the lock: no other writer, so no locked instruction needed.
        self.n.store(self.n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn count(&self) -> Count {
        Count { kind: self.kind, symbol: self.symbol, n: self.n.load(Ordering::Relaxed) }
    }
}

/// The counts of one run, read once its threads are joined.
#[derive(Default)]
pub(super) struct Tallies(Vec<Arc<Tally>>);

impl Tallies {
    fn tally(&mut self, kind: CountKind, symbol: &'static str) -> Arc<Tally> {
        let t = Tally::new(kind, symbol);
        self.0.push(t.clone());
        t
    }

    /// The counts, in the order they were made.
    pub(super) fn counts(&self) -> Vec<Count> {
        self.0.iter().map(|t| t.count()).collect()
    }
}

/// A lock's two tallies: acquisitions, and those whose try failed.
#[derive(Clone)]
struct LockTally {
    acquired: Arc<Tally>,
    contended: Arc<Tally>,
}

impl LockTally {
    fn new(tallies: &mut Tallies, symbol: &'static str) -> LockTally {
        LockTally {
            acquired: tallies.tally(CountKind::Acquired, symbol),
            contended: tallies.tally(CountKind::Contended, symbol),
        }
    }

    /// Counts an acquisition (and whether it was contended); the caller holds the lock.
    fn add(&self, contended: bool) {
        self.acquired.add();
        if contended {
            self.contended.add();
        }
    }
}

fn spin(n: u32) {
    for i in 0..n {
        black_box(i);
    }
}

/// What a holder does: touch every word of the shelf, then spin a little.
/// The words change only in their high halves: a 32-bit read of one (the
/// Rust mutex keeps its data 8 bytes after its futex word, where glibc's
/// `__owner` would be) is always 0, never something that looks like a
/// thread id.
fn hold(shelf: &Shelf) {
    for w in shelf {
        w.store(w.load(Ordering::Relaxed).wrapping_add(1 << 32), Ordering::Relaxed);
    }
    spin(HOLD_SPIN);
}

/// Takes a glibc mutex: trylock, then (when that fails) the blocking lock.
/// Returns whether the try failed, or the error of the lock.
fn acquire_glibc(lock: &GlibcLock) -> Result<bool, i32> {
    // SAFETY: the mutex is a static, initialized (statically or by pi_ready before any thread starts).
    if unsafe { libc::pthread_mutex_trylock(lock.raw()) } == 0 {
        return Ok(false);
    }
    // SAFETY: as above.
    match unsafe { libc::pthread_mutex_lock(lock.raw()) } {
        0 => Ok(true),
        e => Err(e),
    }
}

fn release_glibc(lock: &GlibcLock) {
    // SAFETY: this thread holds the mutex (acquire_glibc succeeded).
    unsafe { libc::pthread_mutex_unlock(lock.raw()) };
}

/// One acquisition of a glibc mutex, a short hold, the release: a waiter's
/// user stack passes through this function's name.
#[inline(never)]
fn lock_glibc_mutex(lock: &GlibcLock, tally: &LockTally) -> Step {
    match acquire_glibc(lock) {
        Ok(contended) => {
            tally.add(contended);
            hold(&lock.shelf);
            release_glibc(lock);
            Step::Counted
        }
        Err(_) => Step::Stop,
    }
}

/// One acquisition of the Rust mutex, a short hold, the release.
#[inline(never)]
fn lock_std_mutex(lock: &Mutex<Shelf>, tally: &LockTally) -> Step {
    let (guard, contended) = match lock.try_lock() {
        Ok(g) => (g, false),
        Err(TryLockError::Poisoned(p)) => (p.into_inner(), false),
        Err(TryLockError::WouldBlock) => (lock.lock().unwrap_or_else(PoisonError::into_inner), true),
    };
    tally.add(contended);
    hold(&guard);
    drop(guard);
    Step::Counted
}

/// `futex`: `threads` threads, each taking the glibc mutex or the Rust
/// mutex at random, so both are contended by every thread (two threads
/// are enough; taking them in turn would let two threads settle into
/// taking them out of phase, never meeting).
pub(super) fn futex(crew: &mut Crew, threads: usize) -> Tallies {
    let mut tallies = Tallies::default();
    let glibc = LockTally::new(&mut tallies, GLIBC_MUTEX);
    let std = LockTally::new(&mut tallies, STD_MUTEX);
    for t in 0..threads {
        let (glibc, std) = (glibc.clone(), std.clone());
        // xorshift64, a different nonzero seed per thread.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
        crew.repeat(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let step = if x & 1 == 0 {
                lock_glibc_mutex(&lockprof_stress_mutex, &glibc)
            } else {
                lock_std_mutex(&lockprof_stress_std_mutex, &std)
            };
            spin(AWAY_SPIN);
            step
        });
    }
    tallies
}

/// Makes [`lockprof_stress_pi_mutex`] a priority-inheritance mutex, once
/// per process, before any thread takes it.
fn pi_ready() -> std::io::Result<()> {
    static READY: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = READY.get_or_init(|| {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: attr is initialized by pthread_mutexattr_init before any
        // other use and destroyed after; the mutex is unlocked and not yet
        // used by anyone (OnceLock runs this before any workload thread).
        unsafe {
            let rc = libc::pthread_mutexattr_init(attr.as_mut_ptr());
            if rc != 0 {
                return Err(rc);
            }
            let mut rc = libc::pthread_mutexattr_setprotocol(attr.as_mut_ptr(), libc::PTHREAD_PRIO_INHERIT);
            if rc == 0 {
                rc = libc::pthread_mutex_init(lockprof_stress_pi_mutex.raw(), attr.as_ptr());
            }
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            if rc != 0 { Err(rc) } else { Ok(()) }
        }
    });
    r.map_err(std::io::Error::from_raw_os_error)
}

/// `futex-pi`: `threads` threads taking one priority-inheritance mutex.
pub(super) fn futex_pi(crew: &mut Crew, threads: usize) -> std::io::Result<Tallies> {
    pi_ready()?;
    let mut tallies = Tallies::default();
    let pi = LockTally::new(&mut tallies, PI_MUTEX);
    for _ in 0..threads {
        let pi = pi.clone();
        crew.repeat(move || {
            let step = lock_glibc_mutex(&lockprof_stress_pi_mutex, &pi);
            spin(AWAY_SPIN);
            step
        });
    }
    Ok(tallies)
}

/// The `condvar` run's queue: items produced and not yet consumed, read
/// and written only under [`lockprof_stress_cond_mutex`].
struct Queue {
    items: AtomicU64,
}

/// The absolute CLOCK_REALTIME time `after` from now (what
/// `pthread_cond_timedwait` takes).
fn realtime_after(after: Duration) -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a valid one.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let nsec = ts.tv_nsec as u64 + u64::from(after.subsec_nanos());
    // `as _`: `time_t`'s width is the C library's (musl's is changing).
    ts.tv_sec = (ts.tv_sec as u64 + after.as_secs() + nsec / 1_000_000_000) as _;
    ts.tv_nsec = (nsec % 1_000_000_000) as _;
    ts
}

/// One consumer step: take the queue's mutex; while the queue is empty,
/// wait on the condition variable (one counted wait each), at most
/// [`CONSUMER_TIMEOUT`] so the run's end is seen; take one item if any.
#[inline(never)]
fn consume_one(queue: &Queue, tally: &LockTally, waits: &Tally) -> Step {
    let lock = &lockprof_stress_cond_mutex;
    let Ok(contended) = acquire_glibc(lock) else {
        return Step::Stop;
    };
    tally.add(contended);
    let mut timed_out = false;
    while queue.items.load(Ordering::Relaxed) == 0 && !timed_out {
        let deadline = realtime_after(CONSUMER_TIMEOUT);
        // SAFETY: both are initialized statics and this thread holds the mutex.
        let rc = unsafe { libc::pthread_cond_timedwait(lockprof_stress_cond.0.get(), lock.raw(), &deadline) };
        // The mutex is held again, whatever rc says.
        waits.add();
        timed_out = rc == libc::ETIMEDOUT;
    }
    let items = queue.items.load(Ordering::Relaxed);
    if items > 0 {
        queue.items.store(items - 1, Ordering::Relaxed);
    }
    release_glibc(lock);
    if items > 0 {
        spin(AWAY_SPIN);
        Step::Counted
    } else {
        Step::Uncounted
    }
}

/// One producer step: a pause, then one item queued and one consumer signalled.
#[inline(never)]
fn produce_one(queue: &Queue, tally: &LockTally) -> Step {
    thread::sleep(PRODUCER_PAUSE);
    let lock = &lockprof_stress_cond_mutex;
    let Ok(contended) = acquire_glibc(lock) else {
        return Step::Stop;
    };
    tally.add(contended);
    queue.items.store(queue.items.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    release_glibc(lock);
    // Signalled after the release: a consumer woken while the producer still
    // held the mutex would block on it at once (contention this workload
    // is meant not to have).
    // SAFETY: an initialized static condition variable.
    unsafe { libc::pthread_cond_signal(lockprof_stress_cond.0.get()) };
    Step::Uncounted
}

/// `condvar`: one producer queueing an item every [`PRODUCER_PAUSE`] or
/// so, `threads` consumers taking them (counted), idle on the condition
/// variable in between.
pub(super) fn condvar(crew: &mut Crew, threads: usize) -> Tallies {
    let mut tallies = Tallies::default();
    let mutex = LockTally::new(&mut tallies, COND_MUTEX);
    let waits = tallies.tally(CountKind::CondvarWaits, COND);
    let queue = Arc::new(Queue { items: AtomicU64::new(0) });
    {
        let (queue, mutex) = (queue.clone(), mutex.clone());
        crew.repeat(move || produce_one(&queue, &mutex));
    }
    for _ in 0..threads {
        let (queue, mutex, waits) = (queue.clone(), mutex.clone(), waits.clone());
        crew.repeat(move || consume_one(&queue, &mutex, &waits));
    }
    tallies
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, atomic::AtomicBool},
        time::{Duration, Instant},
    };

    use super::super::{Count, CountKind, Outcome, Workload, run};

    fn get(out: &Outcome, kind: CountKind, symbol: &str) -> u64 {
        out.counts.iter().find(|c| c.kind == kind && c.symbol == symbol).map(|c| c.n).expect("count reported")
    }

    /// Runs `w` for 200 ms at a time until `done` says the run showed what
    /// it should, with a generous deadline; returns that run.
    fn run_until(w: Workload, threads: usize, done: impl Fn(&Outcome) -> bool) -> Outcome {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out =
                run(w, threads, Duration::from_millis(200), Arc::new(AtomicBool::new(false))).expect("workload runs");
            if done(&out) {
                return out;
            }
            assert!(Instant::now() < deadline, "{w:?} never showed it in 60 s: {:?}", out.counts);
        }
    }

    /// Every lock acquired and contended, no lock contended more often than
    /// acquired, and the run's operations are the acquisitions.
    fn check_locks(w: Workload, threads: usize, symbols: &[&str]) {
        let contended_each = |o: &Outcome| symbols.iter().all(|s| get(o, CountKind::Contended, s) > 0);
        let out = run_until(w, threads, contended_each);
        let mut total = 0;
        for s in symbols {
            let (acquired, contended) = (get(&out, CountKind::Acquired, s), get(&out, CountKind::Contended, s));
            assert!(contended <= acquired, "{s}: {contended} contended of {acquired}");
            total += acquired;
        }
        assert_eq!(out.ops, total, "operations are acquisitions: {:?}", out.counts);
        assert_eq!(out.counts.len(), 2 * symbols.len(), "{:?}", out.counts);
    }

    #[test]
    fn futex_contends_both_mutexes() {
        check_locks(Workload::Futex, 2, &["lockprof_stress_mutex", "lockprof_stress_std_mutex"]);
    }

    #[test]
    fn futex_pi_contends_the_pi_mutex() {
        check_locks(Workload::FutexPi, 3, &["lockprof_stress_pi_mutex"]);
    }

    #[test]
    fn condvar_consumers_wait() {
        let out = run_until(Workload::Condvar, 2, |o| {
            o.ops > 0 && get(o, CountKind::CondvarWaits, "lockprof_stress_cond") > 0
        });
        let (acquired, contended) = (
            get(&out, CountKind::Acquired, "lockprof_stress_cond_mutex"),
            get(&out, CountKind::Contended, "lockprof_stress_cond_mutex"),
        );
        assert!(contended <= acquired, "{contended} contended of {acquired}");
        // Each consumed item took one acquisition by a consumer (and one by the producer).
        assert!(acquired >= out.ops, "{acquired} acquisitions for {} items", out.ops);
    }

    #[test]
    fn counts_print_as_kind_symbol_number() {
        let c = Count { kind: CountKind::Contended, symbol: "lockprof_stress_mutex", n: 12 };
        assert_eq!(c.to_string(), "contended lockprof_stress_mutex 12");
        let c = Count { kind: CountKind::CondvarWaits, symbol: "lockprof_stress_cond", n: 3 };
        assert_eq!(c.to_string(), "condvar-waits lockprof_stress_cond 3");
    }
}
