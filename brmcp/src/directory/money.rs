//! The directory's debits in the harness ledger: the listing fee and each test
//! payment's escrow debit are keyed charges against the provider's balance, so a
//! restart can tell from the ledger's journal whether a debit happened.

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;

use super::store::DirError;
use crate::server::{
    ArgsHash, CallId, CallKey, CallRequest, CallState, Charge, Harness, JournalEntry, Keyed,
};

/// The journal's tool name of a listing-fee debit.
pub const FEE_TOOL: &str = "directory: listing fee";
/// The journal's tool name of a test payment's escrow debit.
pub const ESCROW_TOOL: &str = "directory: test payment";
/// How many of a provider's newest journal entries a restart searches for a debit's
/// key: far more than the debits of one registration (its fee and a handful of test
/// payments) plus the paid calls made since.
const JOURNAL_SCAN: usize = 10_000;
/// The outcome kept with a debit (never replayed to anyone: the key is ours alone).
const DEBIT_OUTCOME: &str = r#"{"content":[],"isError":false}"#;

/// What a debit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Debit {
    /// Debited (now, or before with the same key): the journal entry.
    Done(CallId),
    /// The balance does not cover it; nothing changed.
    Short,
}

fn ledger_err(e: impl std::fmt::Display) -> DirError {
    DirError::Ledger(format!("ledger: {e}"))
}

/// Debits `atoms` from `uid` under `key` (idempotent while the ledger remembers the
/// key; see [`find`] for after).
pub(crate) async fn debit(
    harness: &Harness,
    uid: PeerId,
    tool: &'static str,
    atoms: i64,
    key: &str,
    now: UnixTime,
) -> Result<Debit, DirError> {
    let key = CallKey::new(key).map_err(ledger_err)?;
    let billing = harness.billing().clone();
    let ledger = harness.ledger().cloned();
    let price_atoms = u64::try_from(atoms).map_err(ledger_err)?;
    tokio::task::spawn_blocking(move || {
        let request = CallRequest {
            caller: uid,
            tool,
            price_atoms,
            keyed: Some(Keyed {
                key: &key,
                args: ArgsHash::of_arguments(None),
            }),
        };
        match billing.charge(&request, now).map_err(ledger_err)? {
            Charge::Run(id) => {
                billing
                    .complete(id, DEBIT_OUTCOME, now)
                    .map_err(ledger_err)?;
                Ok(Debit::Done(id))
            }
            Charge::Insufficient(_) => Ok(Debit::Short),
            other => {
                // Already debited with this key: find that entry.
                let found = ledger
                    .as_deref()
                    .and_then(|l| find_sync(l, &uid, key.as_str()).ok().flatten());
                match found {
                    Some(entry) => Ok(Debit::Done(entry.id)),
                    None => Err(ledger_err(format!("debit answered {other:?}"))),
                }
            }
        }
    })
    .await
    .map_err(ledger_err)?
}

fn find_sync(
    ledger: &crate::server::Ledger,
    uid: &PeerId,
    key: &str,
) -> Result<Option<JournalEntry>, DirError> {
    Ok(ledger
        .journal(Some(uid), JOURNAL_SCAN)
        .map_err(ledger_err)?
        .into_iter()
        .find(|e| e.call_key.as_deref() == Some(key)))
}

/// Whether a debit under `key` stands (completed, not refunded), and its id.
pub(crate) async fn standing(
    harness: &Harness,
    uid: PeerId,
    key: &str,
) -> Result<Option<CallId>, DirError> {
    if key.is_empty() {
        return Ok(None);
    }
    let Some(ledger) = harness.ledger().cloned() else {
        return Ok(None);
    };
    let key = key.to_owned();
    tokio::task::spawn_blocking(move || {
        Ok(find_sync(&ledger, &uid, &key)?
            .filter(|e| e.state == CallState::Completed)
            .map(|e| e.id))
    })
    .await
    .map_err(ledger_err)?
}

/// Gives a standing debit back (a no-op for one already refunded).
pub(crate) async fn refund(
    harness: &Harness,
    call: CallId,
    reason: &'static str,
    now: UnixTime,
) -> Result<(), DirError> {
    let Some(ledger) = harness.ledger().cloned() else {
        return Ok(());
    };
    tokio::task::spawn_blocking(
        move || match ledger.journal_entry(call).map_err(ledger_err)? {
            Some(e) if e.state == CallState::Completed => {
                ledger
                    .manual_refund(call, reason, now)
                    .map_err(ledger_err)?;
                Ok(())
            }
            _ => Ok(()),
        },
    )
    .await
    .map_err(ledger_err)?
}

/// `uid`'s balance in whole atoms.
pub(crate) async fn balance_atoms(harness: &Harness, uid: PeerId) -> Result<i64, DirError> {
    let matoms = harness.balance_matoms(uid).await.map_err(ledger_err)?;
    Ok(i64::try_from(matoms / crate::server::MATOMS_PER_ATOM).unwrap_or(i64::MAX))
}

/// 16 random bytes as 32 lowercase hex characters: registration and debit keys.
pub(crate) fn new_key() -> Result<String, DirError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| DirError::Ledger(format!("entropy: {e}")))?;
    Ok(hex::encode(bytes))
}
