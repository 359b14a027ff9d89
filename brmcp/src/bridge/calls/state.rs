//! A journaled call's states and the events that move it, as a pure function: what
//! the journal allows is decided here, before anything is written.

/// Where one call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Recorded before its first send.
    Recorded,
    /// Sent to the bot (at least once).
    Sent,
    /// A payment for it is being made: it may have reached the bot.
    Paying,
    /// Paid: its payment settled.
    Paid,
    /// The bot's outcome is kept, not yet handed to its agent.
    Answered,
    /// Its outcome reached its agent (kept for an exact retry under the agent's own key).
    Delivered,
    /// Its agent stopped waiting; cancelled at the bot. Nothing is kept.
    Cancelled,
}

/// What happens to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// It is about to be sent (again).
    Send,
    /// A payment for it is about to be made.
    Pay,
    /// That payment settled.
    Paid,
    /// That payment was not made.
    Unpaid,
    /// The bot's outcome arrived.
    Answer,
    /// The outcome is handed to the agent.
    Deliver,
    /// The agent stopped waiting.
    Cancel,
    /// The agent calls it again (its own key, or its retry) and this process runs it
    /// from where it stands.
    Reopen,
}

impl State {
    /// As stored.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Sent => "sent",
            Self::Paying => "paying",
            Self::Paid => "paid",
            Self::Answered => "answered",
            Self::Delivered => "delivered",
            Self::Cancelled => "cancelled",
        }
    }

    /// As stored; `None` for text this journal never writes.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "recorded" => Self::Recorded,
            "sent" => Self::Sent,
            "paying" => Self::Paying,
            "paid" => Self::Paid,
            "answered" => Self::Answered,
            "delivered" => Self::Delivered,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }

    /// Sent, possibly paid, and not answered: the bot may be running it.
    pub(crate) const fn in_flight(self) -> bool {
        matches!(
            self,
            Self::Recorded | Self::Sent | Self::Paying | Self::Paid
        )
    }

    /// The state after `event`, or `None` if the event cannot happen in this state
    /// (the write is refused and the call stays as it was). `paid` is whether a
    /// payment for the call settled or may have.
    pub(crate) const fn next(self, event: Event, paid: bool) -> Option<Self> {
        use Event as E;
        Some(match (self, event) {
            (Self::Recorded | Self::Sent, E::Send) => Self::Sent,
            (Self::Paid, E::Send) => Self::Paid,
            (Self::Sent | Self::Paid, E::Pay) => Self::Paying,
            (Self::Paying, E::Paid) => Self::Paid,
            // A refused payment: a call an earlier payment paid stays paid.
            (Self::Paying, E::Unpaid) if paid => Self::Paid,
            (Self::Paying, E::Unpaid) => Self::Sent,
            (s, E::Answer) if s.in_flight() => Self::Answered,
            (Self::Answered | Self::Delivered, E::Deliver) => Self::Delivered,
            (s, E::Cancel) if s.in_flight() => Self::Cancelled,
            // Run again from where it stood; a paid call keeps its payment.
            (
                Self::Cancelled | Self::Recorded | Self::Sent | Self::Paying | Self::Paid,
                E::Reopen,
            ) => {
                if paid {
                    Self::Paid
                } else {
                    Self::Recorded
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [State; 7] = [
        State::Recorded,
        State::Sent,
        State::Paying,
        State::Paid,
        State::Answered,
        State::Delivered,
        State::Cancelled,
    ];

    #[test]
    fn a_paid_call_goes_from_recorded_to_delivered() {
        let mut s = State::Recorded;
        for (event, paid, want) in [
            (Event::Send, false, State::Sent),
            (Event::Pay, false, State::Paying),
            (Event::Paid, true, State::Paid),
            (Event::Send, true, State::Paid),
            (Event::Answer, true, State::Answered),
            (Event::Deliver, true, State::Delivered),
            (Event::Deliver, true, State::Delivered),
        ] {
            s = s
                .next(event, paid)
                .unwrap_or_else(|| panic!("{s:?} {event:?}"));
            assert_eq!(s, want);
        }
    }

    #[test]
    fn an_outcome_is_never_replaced_nor_a_finished_call_reopened_by_its_bot() {
        for s in [State::Answered, State::Delivered, State::Cancelled] {
            for e in [
                Event::Send,
                Event::Pay,
                Event::Paid,
                Event::Answer,
                Event::Cancel,
            ] {
                assert_eq!(s.next(e, true), None, "{s:?} {e:?}");
            }
        }
        for s in ALL {
            assert_eq!(
                s.next(Event::Deliver, false).is_some(),
                matches!(s, State::Answered | State::Delivered),
                "only an outcome is delivered: {s:?}"
            );
        }
    }

    #[test]
    fn a_refused_payment_keeps_an_earlier_one_and_a_reopened_call_its_payment() {
        assert_eq!(State::Paying.next(Event::Unpaid, false), Some(State::Sent));
        assert_eq!(State::Paying.next(Event::Unpaid, true), Some(State::Paid));
        assert_eq!(
            State::Cancelled.next(Event::Reopen, true),
            Some(State::Paid)
        );
        assert_eq!(
            State::Cancelled.next(Event::Reopen, false),
            Some(State::Recorded)
        );
        assert_eq!(State::Answered.next(Event::Reopen, true), None);
    }

    #[test]
    fn stored_names_read_back() {
        for s in ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
        assert_eq!(State::parse("done"), None);
    }
}
