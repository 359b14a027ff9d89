//! The harness on a client: PMs through the data directory's journal, and tips credited
//! in the ledger before they are acknowledged.

use std::path::Path;
use std::sync::Arc;

use brmcp_adapters::BoxError;
use brmcp_clientrpc::{ReceivedTip, Streams, TipHandler};

use super::feed::journal_streams;
use crate::server::{Harness, Ledger, Tip, matoms_as_atoms};

/// Records each tip in the ledger (which credits it once, whatever the redeliveries)
/// before the host acknowledges it.
struct ServeTips {
    harness: Harness,
    ledger: Arc<Ledger>,
}

impl TipHandler for ServeTips {
    async fn handle_tip(&self, tip: ReceivedTip) -> Result<(), BoxError> {
        let Ok(matoms) = u64::try_from(tip.amount_matoms) else {
            // brclient reports settled amounts, never negative ones: nothing to credit.
            tracing::error!(seq = tip.sequence_id, from = %tip.uid, matoms = tip.amount_matoms, "tip with a negative amount not credited");
            return Ok(());
        };
        let outcome = self
            .harness
            .record_tip(Tip {
                seq: tip.sequence_id,
                caller: tip.uid,
                matoms,
            })
            .await?;
        tracing::info!(
            seq = tip.sequence_id,
            caller = %tip.uid,
            atoms = %matoms_as_atoms(matoms),
            outcome = ?outcome,
            "tip received"
        );
        Ok(())
    }

    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledger.clear_tips(up_to)).await??;
        Ok(())
    }
}

/// The streams that feed `harness` from a client: PMs through the data directory's PM
/// journal (record, then ack), tips through the ledger (credit, then ack), and the data
/// directory bound to the client's identity at every connect.
///
/// # Errors
/// When the journal or the ledger cannot be opened.
pub fn harness_streams(datadir: &Path, harness: &Harness) -> Result<Streams, BoxError> {
    let forwarder = harness.clone();
    let streams = journal_streams(datadir, move |from, body| {
        let harness = forwarder.clone();
        async move { harness.handle_pm(from, body).await.map_err(Into::into) }
    })?;
    let tips = ServeTips {
        harness: harness.clone(),
        // The harness opened (and owns) it; this handle only marks cleared tips.
        ledger: Arc::new(Ledger::attach(datadir)?),
    };
    Ok(streams.tips(tips))
}
