//! CPU time of the calling thread and of the whole process, for the benchmarks' account of
//! where online time goes (`fusefss bench model --json`: a bundle reader's reading and
//! decoding, the process's CPU during the online phase).

use std::time::Duration;

/// CPU time the calling thread has used so far (`None` where the system does not say).
pub fn thread() -> Option<Duration> {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time every thread of this process has used so far (`None` where the system does not
/// say).
pub fn process() -> Option<Duration> {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

#[allow(unsafe_code)]
fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid pointer it is given.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    /// Work on this thread advances both clocks; the process's is at least the thread's.
    #[test]
    fn clocks_advance_with_work() {
        let (t0, p0) = (super::thread().unwrap(), super::process().unwrap());
        let mut x = 1u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        let (t1, p1) = (super::thread().unwrap(), super::process().unwrap());
        assert!(t1 > t0 && p1 > p0, "{x}");
        assert!(p1 >= t1);
    }
}
