//! Which caller runs a revival, and what the others learn (SPEC §10): the single flight and the
//! memory of "nothing to rebuild" of an object that holds no stream, as a sans-IO machine
//! ([`Revivals`]). The shell asks it before every revival, whoever woke the instance (a request,
//! the lease alarm), and the simulator drives the same machine.
//!
//! ```text
//!   begin(caller):
//!     a stream is held here ──────────────────────────────────────────────▶ Held
//!     an attempt is under way ────────────────────────────────────────────▶ Wait (then ask again)
//!     a request, and "nothing to rebuild" is remembered ─────────────────▶ Settled
//!     otherwise (the alarm always) ───────────────────────────────────────▶ Run (an Attempt)
//!   finish(attempt, how it went): "nothing to rebuild" is remembered, unless a stream was
//!     installed here since the attempt began
//!   stream_installed (an open, a rebuilt stream): what was remembered is forgotten
//! ```
//!
//! The memory spares the requests that reach an object whose stream is over (late readers, a
//! stats page) a read of its storage each. It is never the lease alarm's: the alarm is the one
//! thing that seals a row this object marked, and an answer given before an open marked it (a
//! reader that came first) would have it release the row for ever. An open installed here since
//! may have marked the row, so an install forgets the answer, and an attempt that began before
//! it remembers nothing.

use super::lease::{Release, Revived};

/// Who asks for a revival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A request reached an instance that holds no stream.
    Request,
    /// The lease alarm fired in an instance that holds no stream.
    Alarm,
}

/// What a caller does.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// A stream is held here (opened, or rebuilt by another caller): nothing to rebuild.
    Held,
    /// Run a revival, and hand the attempt back with [`Revivals::finish`].
    Run(Attempt),
    /// Another caller's attempt is under way: wait until it finishes, then ask again.
    Wait,
    /// An earlier attempt, since the last stream installed here, found nothing to rebuild.
    Settled(Release),
}

/// One caller's revival, under way.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an attempt must be finished (Revivals::finish), or no other caller ever runs"]
pub struct Attempt {
    /// The installs counted when it began.
    installs: u64,
}

/// The revivals of one object's instance.
#[derive(Debug, Default)]
pub struct Revivals {
    running: bool,
    settled: Option<Release>,
    /// Streams installed here so far (opens and rebuilt streams).
    installs: u64,
}

impl Revivals {
    /// `caller` would rebuild the stream; `holds_stream`: this instance holds one now.
    pub fn begin(&mut self, caller: Caller, holds_stream: bool) -> Turn {
        if holds_stream {
            return Turn::Held;
        }
        if self.running {
            return Turn::Wait;
        }
        if let (Caller::Request, Some(release)) = (caller, &self.settled) {
            return Turn::Settled(release.clone());
        }
        self.running = true;
        Turn::Run(Attempt { installs: self.installs })
    }

    /// The attempt is over: how it went (`None`: it was given up before it decided, its future
    /// dropped with its request). The callers waiting for it ask again.
    pub fn finish(&mut self, attempt: Attempt, outcome: Option<&Revived>) {
        self.running = false;
        if let (Some(Revived::Nothing(release)), true) = (outcome, attempt.installs == self.installs) {
            self.settled = Some(release.clone());
        }
    }

    /// A stream was installed here (an open, or a rebuilt stream): it may mark the row, so what
    /// was remembered is forgotten.
    pub fn stream_installed(&mut self) {
        self.installs += 1;
        self.settled = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(revivals: &mut Revivals, caller: Caller) -> Attempt {
        match revivals.begin(caller, false) {
            Turn::Run(attempt) => attempt,
            other => panic!("{caller:?} should run, got {other:?}"),
        }
    }

    #[test]
    fn one_attempt_at_a_time_and_a_held_stream_needs_none() {
        let mut revivals = Revivals::default();
        assert_eq!(revivals.begin(Caller::Request, true), Turn::Held);
        let first = run(&mut revivals, Caller::Request);
        assert_eq!(revivals.begin(Caller::Request, false), Turn::Wait);
        assert_eq!(revivals.begin(Caller::Alarm, false), Turn::Wait);
        revivals.finish(first, Some(&Revived::Failed(super::super::RevivalFailure::Storage("down".into()))));
        let _ = run(&mut revivals, Caller::Request); // a failure decided nothing: tried again
    }

    #[test]
    fn nothing_to_rebuild_answers_requests_but_never_the_alarm() {
        let mut revivals = Revivals::default();
        let first = run(&mut revivals, Caller::Request);
        revivals.finish(first, Some(&Revived::Nothing(Release::NothingArmed)));
        assert_eq!(revivals.begin(Caller::Request, false), Turn::Settled(Release::NothingArmed));
        let alarm = run(&mut revivals, Caller::Alarm);
        revivals.finish(alarm, Some(&Revived::Nothing(Release::NothingArmed)));
    }

    #[test]
    fn an_install_forgets_the_answer_and_an_attempt_begun_before_it_remembers_nothing() {
        let mut revivals = Revivals::default();
        let first = run(&mut revivals, Caller::Request);
        revivals.finish(first, Some(&Revived::Nothing(Release::NothingArmed)));
        revivals.stream_installed(); // an open, which may mark the row
        let _ = run(&mut revivals, Caller::Request);
        let mut revivals = Revivals::default();
        let begun = run(&mut revivals, Caller::Request);
        revivals.stream_installed(); // an open while the request's revival read nothing armed
        revivals.finish(begun, Some(&Revived::Nothing(Release::NothingArmed)));
        let _ = run(&mut revivals, Caller::Request);
    }

    #[test]
    fn an_attempt_given_up_decides_nothing() {
        let mut revivals = Revivals::default();
        let dropped = run(&mut revivals, Caller::Request);
        revivals.finish(dropped, None);
        let _ = run(&mut revivals, Caller::Request);
    }
}
