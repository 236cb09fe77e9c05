//! Stopping a run cleanly: Ctrl-C, SIGTERM (what a cluster sends before it preempts a job) or
//! SIGUSR1 (what Slurm's `--signal` sends ahead of time) lets the current optimizer step finish,
//! then the run writes a verified checkpoint of that step and returns; a second signal exits at
//! once. The run resumes from that checkpoint exactly as if it had never stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The signals that ask a run to stop.
#[cfg(unix)]
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1];

/// A request to stop, shared between whoever asks (a signal handler, a test) and the loop.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicUsize>);

/// What asked a run to stop: a signal's number (0 when asked without a signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl Signal {
    /// The signal's name (`SIGTERM` …), or "a stop request".
    pub fn name(&self) -> String {
        signal_hook::low_level::signal_name(self.0).map_or_else(|| "a stop request".into(), str::to_string)
    }

    /// The exit code a shell expects of a process a signal ended: 128 + its number.
    pub fn exit_code(&self) -> u8 {
        u8::try_from(128 + self.0).unwrap_or(1)
    }
}

impl Stop {
    /// A request nobody has made yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Asks the run to stop after its current step (`signal` says why; 0 for none).
    pub fn request(&self, signal: i32) {
        // Stored +1 so that "signal 0" still reads as a request.
        self.0.store(signal as usize + 1, Ordering::SeqCst);
    }

    /// Whether a stop was asked for, and by what.
    pub fn requested(&self) -> Option<Signal> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            n => Some(Signal((n - 1) as i32)),
        }
    }

    /// A request made by the first of [`STOP_SIGNALS`] this process receives; a second one
    /// ends the process at once with 128 + its number.
    #[cfg(unix)]
    pub fn on_signals() -> std::io::Result<Stop> {
        use signal_hook::flag;
        let stop = Stop::new();
        let asked = Arc::new(AtomicBool::new(false));
        for sig in STOP_SIGNALS {
            // Registered first, so it runs first: it exits only if an earlier signal set `asked`.
            flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&asked))?;
            flag::register_usize(sig, Arc::clone(&stop.0), sig as usize + 1)?;
            flag::register(sig, Arc::clone(&asked))?;
        }
        Ok(stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_its_signal_and_exit_code() {
        let stop = Stop::new();
        assert_eq!(stop.requested(), None);
        stop.clone().request(libc::SIGTERM);
        let s = stop.requested().unwrap();
        assert_eq!(s.name(), "SIGTERM");
        assert_eq!(s.exit_code(), 143);
        stop.request(0);
        assert_eq!(stop.requested().unwrap().name(), "a stop request");
    }
}
