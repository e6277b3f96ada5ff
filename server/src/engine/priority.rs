//! Which lane of its model's queue a request waits in.
//!
//! A model's queue holds two lanes: interactive (a person waits for the
//! answer) and background (a client's housekeeping: a chat's title, its
//! tags, suggested follow-ups, search queries). Each lane is first come,
//! first served, and a background request never starts while an
//! interactive one waits for the same model; the queue's bound counts
//! both. The queue keeps every interactive job before every background
//! one, so the next job is always its front.

/// A request's lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// A person waits for it (the default).
    #[default]
    Interactive,
    /// It may wait for every interactive request; it runs with thinking
    /// off.
    Background,
}

impl Priority {
    /// Its name on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Background => "background",
        }
    }

    /// The lane `value` names (`interactive` or `background`, any case,
    /// surrounding spaces ignored); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("interactive") {
            Some(Self::Interactive)
        } else if value.eq_ignore_ascii_case("background") {
            Some(Self::Background)
        } else {
            None
        }
    }
}

/// Where a new job of `priority` goes in a queue whose jobs have
/// `queued` priorities (interactive ones first): after every job of its
/// own lane and every interactive one.
pub(super) fn insert_at(queued: impl Iterator<Item = Priority>, priority: Priority) -> usize {
    let mut len = 0;
    for (index, queued) in queued.enumerate() {
        if priority == Priority::Interactive && queued == Priority::Background {
            return index;
        }
        len = index + 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use Priority::{Background as B, Interactive as I};

    #[test]
    fn an_interactive_job_goes_before_every_waiting_background_job() {
        assert_eq!(insert_at([I, I, B, B].into_iter(), I), 2);
        assert_eq!(insert_at([B, B].into_iter(), I), 0);
        assert_eq!(insert_at([I, I].into_iter(), I), 2);
    }

    #[test]
    fn a_background_job_goes_last() {
        assert_eq!(insert_at([I, B].into_iter(), B), 2);
        assert_eq!(insert_at(std::iter::empty(), B), 0);
    }

    #[test]
    fn lane_names_parse_in_any_case_and_nothing_else_does() {
        assert_eq!(Priority::parse(" Background "), Some(B));
        assert_eq!(Priority::parse("interactive"), Some(I));
        assert_eq!(Priority::parse("low"), None);
        assert_eq!(Priority::parse(""), None);
    }
}
