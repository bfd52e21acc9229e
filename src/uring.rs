//! io_uring rings that do not interrupt their reactor: `COOP_TASKRUN`.
//!
//! Without `IORING_SETUP_COOP_TASKRUN`, every completion that arrives while
//! the reactor runs user code kicks its CPU with an inter-processor
//! interrupt, so that the kernel can post the completion at once. A shard
//! never needs that: it is the only thread on its rings, and it enters the
//! kernel (a `recv`, a `send`, an `io_uring_enter`) many times per request,
//! which posts pending completions anyway; a parked reactor is still woken.
//! Measured here (perf/README.md, "Stop 25"), the kicks were 0.7 per search
//! and, on a virtual machine where each is an exit to the hypervisor, the
//! largest item of kernel time per request.
//!
//! glommio 0.9 creates its rings itself and offers no setup flags, and both
//! its bundled liburing and its Rust bindings call `io_uring_setup` through
//! libc's `syscall()`. A binary that includes this file defines `syscall`
//! (the executable's definition takes precedence over libc's): it adds
//! `COOP_TASKRUN` to rings set up without polling flags when the binary's
//! `crate::coop_taskrun()` says so, falls back to the plain setup on a
//! kernel that refuses the flag (before 5.19), and passes every other call
//! through unchanged, with libc's return and `errno` convention.
//!
//! Two binaries include it: `coredir` (`server.io_uring_coop_taskrun`, on
//! by default) and `coredir-perf`. The load generator needs it as much:
//! a response delivered over the loopback is posted to the client's ring
//! in the *server's* context, and without the flag the kernel then kicks
//! the client's CPU with an interrupt, which the server's CPU pays for
//! (perf/README.md, "Stop 50"). A client on another machine costs a
//! server nothing of the kind.

const SYS_IO_URING_SETUP: libc::c_long = 425;
const IORING_SETUP_IOPOLL: u32 = 1 << 0;
const IORING_SETUP_SQPOLL: u32 = 1 << 1;
const IORING_SETUP_COOP_TASKRUN: u32 = 1 << 8;
/// `struct io_uring_params`: `sq_entries`, `cq_entries`, then `flags`.
const PARAMS_FLAGS_OFFSET: usize = 8;

/// libc's `syscall(number, ...)`: the x86-64 calling convention passes a
/// variadic call's integer arguments exactly as these seven.
///
/// # Safety
/// As libc's: the arguments must be valid for the system call.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
    d: libc::c_long,
    e: libc::c_long,
    f: libc::c_long,
) -> libc::c_long {
    if n == SYS_IO_URING_SETUP && b != 0 && crate::coop_taskrun() {
        let flags = (b as usize + PARAMS_FLAGS_OFFSET) as *mut u32;
        // SAFETY: the caller passes a valid `io_uring_params`.
        let asked = unsafe { flags.read() };
        if asked & (IORING_SETUP_IOPOLL | IORING_SETUP_SQPOLL | IORING_SETUP_COOP_TASKRUN) == 0 {
            unsafe { flags.write(asked | IORING_SETUP_COOP_TASKRUN) };
            // SAFETY: as the caller's call, with one more flag.
            let fd = unsafe { raw(n, [a, b, c, d, e, f]) };
            if fd != -(libc::EINVAL as libc::c_long) {
                return with_errno(fd);
            }
            unsafe { flags.write(asked) };
        }
    }
    // SAFETY: the caller's call, unchanged.
    with_errno(unsafe { raw(n, [a, b, c, d, e, f]) })
}

/// libc's convention: -1 with `errno` set for the kernel's -4095..-1.
fn with_errno(ret: libc::c_long) -> libc::c_long {
    if (-4095..0).contains(&ret) {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = -ret as libc::c_int };
        return -1;
    }
    ret
}

/// The `syscall` instruction with six arguments.
///
/// # Safety
/// The arguments must be valid for system call `n`.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(n: libc::c_long, args: [libc::c_long; 6]) -> libc::c_long {
    let ret: libc::c_long;
    // SAFETY: the Linux x86-64 system call convention; rcx and r11 are
    // clobbered by the instruction.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring set up through libc's `syscall` (as glommio does) gets
    /// `COOP_TASKRUN`, a polling ring does not, and another call keeps
    /// libc's return and errno convention.
    #[test]
    fn rings_set_up_through_syscall_get_coop_taskrun() {
        let setup = |flags: u32| {
            let mut params = [0u32; 30];
            params[PARAMS_FLAGS_OFFSET / 4] = flags;
            // SAFETY: a valid io_uring_params (120 bytes, zeroed).
            let fd = unsafe { libc::syscall(SYS_IO_URING_SETUP, 4, params.as_mut_ptr()) };
            assert!(fd >= 0, "io_uring_setup: {}", std::io::Error::last_os_error());
            // SAFETY: the ring was just made here.
            unsafe { libc::close(fd as libc::c_int) };
            params[PARAMS_FLAGS_OFFSET / 4]
        };
        assert_eq!(setup(0), IORING_SETUP_COOP_TASKRUN);
        assert_eq!(setup(IORING_SETUP_IOPOLL), IORING_SETUP_IOPOLL);
        // SAFETY: closing an invalid descriptor is harmless.
        assert_eq!(unsafe { libc::syscall(libc::SYS_close, -1) }, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBADF));
    }
}
