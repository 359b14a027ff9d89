//! A journaled call's payment, looked up by the call's key: how a restart tells the
//! payment of a call its journal says was about to pay from another of the same agent,
//! bot, tool and amount; or by the row id the journal recorded as settled.

use brmcp_adapters::PeerId;
use rusqlite::{OptionalExtension, params};

use super::{ENTRY_COLUMNS, SpendEntry, SpendError, SpendLog, entry, i64_of};

/// A journaled call whose payment [`SpendLog::payment_for_call`] looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPayment<'a> {
    /// The bot paid.
    pub bot: &'a PeerId,
    /// The call journal's key of the call.
    pub key: &'a str,
    /// The agent whose call it is.
    pub agent: &'a str,
    /// The tool called.
    pub tool: &'a str,
    /// The atoms of the payment.
    pub atoms: u64,
    /// When the call began, unix seconds.
    pub since: i64,
}

impl SpendLog {
    /// The latest payment made for `call`: the row its reservation wrote, which names
    /// it. A row written before rows named their call (schema version 5 and older) is
    /// taken for it when it may be it: of the call's agent, bot, tool and atoms,
    /// reserved no earlier than the call began. `None`: no payment of the call
    /// reached the log (its journal may say it was about to pay, and a crash came
    /// first).
    ///
    /// # Errors
    /// SQLite's.
    pub fn payment_for_call(
        &self,
        call: &CallPayment<'_>,
    ) -> Result<Option<SpendEntry>, SpendError> {
        self.entry_where(
            "bot = ?1 AND (call_key = ?2 OR (call_key IS NULL AND agent = ?3 AND tool = ?4 \
             AND atoms = ?5 AND ts >= ?6)) ORDER BY call_key IS NULL, id DESC LIMIT 1",
            params![
                call.bot.to_string(),
                call.key,
                call.agent,
                call.tool,
                i64_of(call.atoms),
                call.since
            ],
        )
    }

    /// The latest payment whose reservation names the call of `key` to `bot`; `None`
    /// when none does (the call paid nothing, or was refused before its reservation).
    ///
    /// # Errors
    /// SQLite's.
    pub fn payment_of_key(
        &self,
        bot: &PeerId,
        key: &str,
    ) -> Result<Option<SpendEntry>, SpendError> {
        self.entry_where(
            "bot = ?1 AND call_key = ?2 ORDER BY id DESC LIMIT 1",
            params![bot.to_string(), key],
        )
    }

    /// The payment of row `id`, as the call journal records a payment it settled;
    /// `None` when no such row is left (pruned, or never written).
    ///
    /// # Errors
    /// SQLite's.
    pub fn payment(&self, id: i64) -> Result<Option<SpendEntry>, SpendError> {
        self.entry_where("id = ?1", params![id])
    }

    /// The first row of the spend log matching `filter` (a `WHERE` clause, with its
    /// order and limit), if any.
    fn entry_where(
        &self,
        filter: &str,
        params: impl rusqlite::Params,
    ) -> Result<Option<SpendEntry>, SpendError> {
        let sql = format!("SELECT {ENTRY_COLUMNS} FROM spend WHERE {filter}");
        Ok(self.db().query_row(&sql, params, entry).optional()?)
    }
}
