//! A tiny KVM VMM for lockprof's yield_to test (run inside the guest kernel of
//! `cargo xtask vm-test`, where nested SVM makes `/dev/kvm` work).
//!
//! Two vCPUs in real mode share one CPU of the host (here: the test guest):
//! vCPU 1 raises a flag and spins; vCPU 0 waits for the flag, then issues
//! `KVM_HC_SCHED_YIELD` hypercalls (`vmmcall`, eax = 11, ebx = 1, the APIC
//! id of vCPU 1) `--hypercalls` times, counting each in guest memory, and
//! exits through an `out` to port 0x10. Sharing one CPU makes every
//! hypercall reach `yield_to()`: the target is runnable but preempted
//! (`vcpu->ready`) and the yielder's run queue has more than one task, so
//! these yields succeed.
//!
//! Then the yielding vCPU thread switches itself to SCHED_FIFO and the guest
//! makes as many hypercalls again (exit through port 0x11): `yield_to()` is
//! still called, but a real-time task cannot yield to a fair-class one, so
//! it returns 0 (not yielded) every time. KVM's statistics and lockprof's
//! split must then both say half yielded, half not.
//!
//! Prints one line, `YIELD-VMM {json}`, with the hypercalls made and KVM's own
//! `directed_yield_attempted`/`directed_yield_successful` counters of this VM
//! (read from debugfs before the VM is torn down; `null` on kernels that do
//! not keep them).
//!
//! Usage: `yield_vmm [--hypercalls N] [--cpu C] [--timeout-s S]`

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use kvm_bindings::{KVM_MP_STATE_RUNNABLE, kvm_mp_state, kvm_userspace_memory_region};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd};

const MEM_SIZE: usize = 1 << 20;
const YIELDER_CODE: usize = 0x1000;
const TARGET_CODE: usize = 0x2000;
/// Byte set to 1 by the target once it runs.
const FLAG: u16 = 0x3000;
/// 16-bit count of completed hypercalls, kept by the yielder.
const DONE_COUNT: u16 = 0x3002;
/// Port the yielder writes to after the first (fair-class) phase.
const PHASE_PORT: u16 = 0x10;
/// Port the yielder writes to when it is done.
const EXIT_PORT: u16 = 0x11;
/// `KVM_HC_SCHED_YIELD`.
const HC_SCHED_YIELD: u32 = 11;

fn le16(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

/// `hypercalls` yield hypercalls to APIC id 1, each counted at DONE_COUNT,
/// then `out port, al`.
fn hypercall_loop(c: &mut Vec<u8>, hypercalls: u16, port: u16) {
    // mov cx, hypercalls
    c.push(0xb9);
    c.extend(le16(hypercalls));
    let top = c.len();
    // mov eax, 11 ; mov ebx, 1 (target APIC id) ; vmmcall
    c.extend([0x66, 0xb8]);
    c.extend(HC_SCHED_YIELD.to_le_bytes());
    c.extend([0x66, 0xbb, 0x01, 0x00, 0x00, 0x00]);
    c.extend([0x0f, 0x01, 0xd9]);
    // inc word [DONE_COUNT]
    c.extend([0xff, 0x06]);
    c.extend(le16(DONE_COUNT));
    // dec cx ; jnz top
    c.push(0x49);
    let rel = top as isize - (c.len() as isize + 2);
    c.extend([0x75, rel as i8 as u8]);
    // out port, al
    c.extend([0xe6, port as u8]);
}

/// Real-mode code of the yielding vCPU: wait for the target, two phases of
/// hypercalls, then halt.
fn yielder_code(hypercalls: u16) -> Vec<u8> {
    let mut c = Vec::new();
    // wait: cmp byte [FLAG], 1 ; jne wait
    c.extend([0x80, 0x3e]);
    c.extend(le16(FLAG));
    c.extend([0x01, 0x75, 0xf9]);
    hypercall_loop(&mut c, hypercalls, PHASE_PORT);
    hypercall_loop(&mut c, hypercalls, EXIT_PORT);
    // hlt ; jmp $-1
    c.extend([0xf4, 0xeb, 0xfd]);
    c
}

/// Makes the calling thread SCHED_FIFO (priority 1).
fn go_realtime() -> std::io::Result<()> {
    // SAFETY: sched_param is plain data (musl adds fields); zeroed is valid.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 1;
    // The raw system call: musl's sched_setscheduler() is a stub returning
    // ENOSYS (the kernel call is per thread, which is what we want here).
    // SAFETY: the kernel reads one int (sched_priority, the first field of
    // a valid sched_param); pid 0 = this thread.
    let rc =
        unsafe { libc::syscall(libc::SYS_sched_setscheduler, 0, libc::SCHED_FIFO, &param as *const libc::sched_param) };
    if rc != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Real-mode code of the target vCPU: raise the flag, then spin forever.
fn target_code() -> Vec<u8> {
    let mut c = vec![0xc6, 0x06];
    c.extend(le16(FLAG));
    // mov byte [FLAG], 1 ; spin: pause ; jmp spin
    c.extend([0x01, 0xf3, 0x90, 0xeb, 0xfc]);
    c
}

fn setup_vcpu(vcpu: &VcpuFd, rip: u64, ap: bool) -> anyhow::Result<()> {
    let mut sregs = vcpu.get_sregs()?;
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    sregs.ds.base = 0;
    sregs.ds.selector = 0;
    vcpu.set_sregs(&sregs)?;
    let mut regs = vcpu.get_regs()?;
    regs.rip = rip;
    regs.rflags = 2;
    vcpu.set_regs(&regs)?;
    if ap {
        // With the in-kernel LAPIC, APs wait for INIT/SIPI: start it directly.
        vcpu.set_mp_state(kvm_mp_state { mp_state: KVM_MP_STATE_RUNNABLE })?;
    }
    Ok(())
}

fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within the set for cpu < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity reads a valid cpu_set_t of the given size; 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A per-VM KVM statistic from debugfs; `None` when this kernel does not
/// keep it (the directed-yield statistics appeared after 5.10).
fn kvm_stat(dir: &str, name: &str) -> anyhow::Result<Option<u64>> {
    let path = format!("{dir}/{name}");
    if !std::path::Path::new(dir).is_dir() {
        anyhow::bail!("{dir} is missing (is debugfs mounted?)");
    }
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(Some(s.trim().parse()?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{path}: {e}")),
    }
}

/// A JSON number or `null`.
fn json_num(v: Option<u64>) -> String {
    v.map_or_else(|| "null".to_string(), |v| v.to_string())
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> anyhow::Result<T> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            args.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| anyhow::anyhow!("{name} needs a numeric value"))
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hypercalls: u16 = arg(&args, "--hypercalls", 300)?;
    let cpu: usize = arg(&args, "--cpu", 0)?;
    let timeout = Duration::from_secs(arg(&args, "--timeout-s", 60)?);
    anyhow::ensure!(hypercalls > 0 && hypercalls <= u16::MAX / 2, "--hypercalls must be 1..={}", u16::MAX / 2);
    pin_to(cpu)?;

    let kvm = Kvm::new().map_err(|e| anyhow::anyhow!("/dev/kvm: {e} (are the kvm modules loaded?)"))?;
    let vm = kvm.create_vm()?;
    // SAFETY: an anonymous private mapping of MEM_SIZE bytes, checked below.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MEM_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    anyhow::ensure!(mem != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    let mem = mem.cast::<u8>();
    let region = kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: MEM_SIZE as u64,
        userspace_addr: mem as u64,
        flags: 0,
    };
    // SAFETY: the region is a live mapping of memory_size bytes that outlives the VM
    // (it is never unmapped; the process exits with the VM).
    unsafe { vm.set_user_memory_region(region)? };
    let write = |at: usize, code: &[u8]| {
        assert!(at + code.len() <= MEM_SIZE);
        // SAFETY: within the mapping (checked above); no vCPU runs yet.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), mem.add(at), code.len()) };
    };
    write(YIELDER_CODE, &yielder_code(hypercalls));
    write(TARGET_CODE, &target_code());

    vm.set_tss_address(0xfffb_d000)?;
    vm.create_irq_chip()?;
    let mut yielder = vm.create_vcpu(0)?;
    let mut target = vm.create_vcpu(1)?;
    setup_vcpu(&yielder, YIELDER_CODE as u64, false)?;
    setup_vcpu(&target, TARGET_CODE as u64, true)?;
    // KVM builds its APIC-id map while each vCPU is created, before that
    // vCPU is online, so the map misses vCPU 1 until the LAPIC state changes:
    // writing it back makes KVM rebuild the map (kvm_sched_yield looks the
    // target up there).
    for vcpu in [&yielder, &target] {
        let lapic = vcpu.get_lapic()?;
        vcpu.set_lapic(&lapic)?;
    }

    let target_tid = Arc::new(AtomicU32::new(0));
    {
        let tid = target_tid.clone();
        std::thread::spawn(move || {
            let _ = pin_to(cpu);
            tid.store(gettid(), Ordering::SeqCst);
            loop {
                match target.run() {
                    Ok(VcpuExit::Hlt) | Ok(VcpuExit::IoOut(..)) | Ok(VcpuExit::IoIn(..)) => {}
                    Ok(VcpuExit::Intr) => {}
                    Ok(other) => {
                        eprintln!("yield_vmm: target vCPU stopped: {other:?}");
                        return;
                    }
                    Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
                    Err(e) => {
                        eprintln!("yield_vmm: target vCPU: {e}");
                        return;
                    }
                }
            }
        });
    }

    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = pin_to(cpu);
        let tid = gettid();
        let r = loop {
            match yielder.run() {
                Ok(VcpuExit::IoOut(port, _)) if port == PHASE_PORT => {
                    if let Err(e) = go_realtime() {
                        break Err(format!("sched_setscheduler(SCHED_FIFO): {e}"));
                    }
                }
                Ok(VcpuExit::IoOut(port, _)) if port == EXIT_PORT => break Ok(()),
                Ok(VcpuExit::Intr) => {}
                Ok(other) => break Err(format!("yielder vCPU stopped: {other:?}")),
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {}
                Err(e) => break Err(format!("yielder vCPU: {e}")),
            }
        };
        let _ = done_tx.send((tid, r));
    });

    let start = Instant::now();
    let (yielder_tid, r) = done_rx
        .recv_timeout(timeout)
        .map_err(|_| anyhow::anyhow!("the yielder did not finish within {} s", timeout.as_secs()))?;
    r.map_err(|e| anyhow::anyhow!(e))?;
    let elapsed = start.elapsed();
    // SAFETY: within the mapping; the yielder has stopped writing.
    let made = unsafe { std::ptr::read_volatile(mem.add(DONE_COUNT as usize).cast::<u16>()) };

    // KVM's own per-VM statistics (sums over the VM's vCPUs).
    use std::os::fd::AsRawFd;
    let dir = format!("/sys/kernel/debug/kvm/{}-{}", std::process::id(), vm.as_raw_fd());
    let attempted = kvm_stat(&dir, "directed_yield_attempted")?;
    let successful = kvm_stat(&dir, "directed_yield_successful")?;
    println!(
        "YIELD-VMM {{\"hypercalls\":{made},\"attempted\":{},\"successful\":{},\"rt_phase\":{hypercalls},\"pid\":{},\"yielder_tid\":{yielder_tid},\"target_tid\":{},\"elapsed_ms\":{}}}",
        json_num(attempted),
        json_num(successful),
        std::process::id(),
        target_tid.load(Ordering::SeqCst),
        elapsed.as_millis()
    );
    // The target vCPU spins forever: leave without joining it.
    std::process::exit(0);
}
