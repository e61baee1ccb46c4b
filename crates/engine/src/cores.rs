//! Where the threads of an in-process run go: the two servers of [`crate::run::run_pair`]
//! share one machine, so each is pinned to a core of its own (as two machines would give
//! them), and a bundle reader that feeds a server runs on that server's core at the lowest
//! priority ([`idle_this_thread`]), in the server's waits.
//!
//! Without pinning, the scheduler woke a server that had slept through a simulated round
//! trip on the core its peer was computing on, and both shared it until it balanced them
//! again (`fusefss bench model --net lan`, bert-tiny: FuseFSS 136 → 125 ms, SIGMA 217 → 205
//! ms; in process 96 → 84 and 131 → 115; docs/benchmarks.md).

use fss::Party;

/// How much nicer than a server a bundle reader runs where it is not in the idle class
/// ([`lower_this_thread`]): it takes a core the server is computing on about a tenth of
/// the time.
pub const READER_NICE: i32 = 10;

/// The core of party `party`'s server in an in-process run: the first or the second of the
/// cores this process may run on, `None` if it may run on fewer than two.
pub fn for_party(party: Party) -> Option<usize> {
    static ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    let allowed = ALLOWED.get_or_init(allowed_cores);
    (allowed.len() >= 2).then(|| allowed[party.bit() as usize])
}

/// Pins the calling thread to core `cpu`; `false` if the system refused (the thread then
/// runs where the scheduler puts it: timing changes, nothing else).
#[allow(unsafe_code)]
pub fn pin_this_thread(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return false;
        }
        // SAFETY: an all-zero `cpu_set_t` is the empty set; `CPU_SET` sets a bit inside it
        // (`cpu` is below its size, checked above); `sched_setaffinity` only reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
    }
}

/// Puts the calling thread in Linux's idle class (`SCHED_IDLE`): it runs when its core has
/// nothing else to run and gives the core back at once when a thread of the normal class
/// wakes up; `false` if the system refused (or elsewhere than Linux).
///
/// For a bundle reader pinned beside its server ([`for_party`]): at [`READER_NICE`] it
/// still took about a tenth of the core while the server computed, and under `--net lan`
/// the server's computation between round trips stretched by that much (`fusefss bench
/// model --net lan`, bert-tiny, four alternated sets of three runs: FuseFSS 122.5 → 117.9 ms,
/// SIGMA 203.2 → 198.2; in process unchanged, 87–88 and 123–125 ms; docs/benchmarks.md).
/// Not for a thread that may share its core with busy threads of other processes: one in
/// this class then gets almost none of it (the streaming dealer, `fusefss generate`, keeps
/// a nice value for that reason).
#[allow(unsafe_code)]
pub fn idle_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads the parameter block only; pid 0 is the calling
        // thread.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Makes the calling thread `nice` steps nicer (Linux's nice value is per thread); `false`
/// if the system refused.
#[allow(unsafe_code)]
pub fn lower_this_thread(nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `gettid` has no arguments and cannot fail; `setpriority` reads its three
        // integers only, and under `PRIO_PROCESS` a thread id names that thread alone.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        false
    }
}

/// The cores the process's main thread may run on (a server thread may already be pinned:
/// its own mask would name one core).
#[allow(unsafe_code)]
fn allowed_cores() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: an all-zero `cpu_set_t` is a valid set for `sched_getaffinity` to fill;
        // `CPU_ISSET` reads bits inside it (indices below its size).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(libc::getpid(), std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0
            {
                return vec![];
            }
            (0..8 * std::mem::size_of::<libc::cpu_set_t>()).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two parties get two different cores the process may use, and a thread pinned to
    /// one runs there; lowering a thread's priority is allowed.
    #[test]
    fn parties_get_two_cores_and_threads_stay_on_them() {
        let allowed = allowed_cores();
        assert!(!allowed.is_empty());
        match (for_party(Party::P0), for_party(Party::P1)) {
            (Some(a), Some(b)) => {
                assert!(a != b && allowed.contains(&a) && allowed.contains(&b));
                let on = std::thread::spawn(move || {
                    assert!(pin_this_thread(b));
                    (0..100).map(|_| current_cpu()).all(|c| c == Some(b) || c.is_none())
                });
                assert!(on.join().unwrap(), "a pinned thread ran elsewhere");
            }
            (None, None) => assert!(allowed.len() < 2),
            other => panic!("one party has a core and the other none: {other:?}"),
        }
        assert!(std::thread::spawn(|| lower_this_thread(READER_NICE)).join().unwrap());
        // A thread the system lets into the idle class is in it (where it is refused, a
        // reader keeps its nice value: nothing to check).
        let (idle, now) = std::thread::spawn(|| (idle_this_thread(), policy())).join().unwrap();
        #[cfg(target_os = "linux")]
        assert!(!idle || now == libc::SCHED_IDLE, "idle class reported but policy {now}");
        #[cfg(not(target_os = "linux"))]
        assert!(!idle && now == -1);
    }

    #[allow(unsafe_code)]
    fn policy() -> i32 {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: pid 0 is the calling thread; no pointer is passed.
            unsafe { libc::sched_getscheduler(0) }
        }
        #[cfg(not(target_os = "linux"))]
        {
            -1
        }
    }

    #[allow(unsafe_code)]
    fn current_cpu() -> Option<usize> {
        // SAFETY: `sched_getcpu` has no arguments.
        let c = unsafe { libc::sched_getcpu() };
        usize::try_from(c).ok()
    }
}
