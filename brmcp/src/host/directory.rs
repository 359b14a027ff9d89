//! The directory on a client: its payer (tips), its introducer (key exchanges mediated
//! by a peer directory) and the key exchange stream it waits on.

use brmcp_adapters::{BoxError, PeerId};
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, KxCompleted, Streams, TipOutcome};

use crate::directory::{Directory, IntroduceFuture, Introducer, PayError, PayFuture, Payer};

/// Tips through the Bison Relay client, telling a refused or failed tip (nothing paid)
/// from one whose outcome is unknown.
pub struct HostPayer(pub ClientRpcHost);

impl Payer for HostPayer {
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_> {
        Box::pin(async move {
            match self.0.tip(payee, atoms).await {
                Ok(TipOutcome::Paid { .. }) => Ok(()),
                Ok(TipOutcome::Failed { error, .. }) => {
                    Err(PayError::Failed(format!("tip failed: {error}").into()))
                }
                Err(
                    e @ (ClientRpcError::Rpc { .. }
                    | ClientRpcError::Config(_)
                    | ClientRpcError::NoTipProgress),
                ) => Err(PayError::Failed(format!("tip: {e}").into())),
                Ok(_) | Err(_) => Err(PayError::Unconfirmed),
            }
        })
    }
}

/// Key exchanges through a peer directory: clientrpc's `MediateKX`, the peer mediating
/// toward the provider (it knows both sides).
pub struct HostIntroducer(pub ClientRpcHost);

impl Introducer for HostIntroducer {
    fn introduce(&self, mediator: PeerId, target: PeerId) -> IntroduceFuture<'_> {
        Box::pin(async move {
            self.0
                .mediate_kx(mediator, target)
                .await
                .map_err(|e| format!("mediate kx: {e}").into())
        })
    }
}

/// Adds the KX stream to `streams`: every completed exchange goes to
/// [`Directory::notify_kx`] (a lead awaiting it gets its one invite) before it is
/// acknowledged, so an exchange a crash interrupted is offered again at restart.
pub fn with_kx(streams: Streams, directory: &Directory) -> Streams {
    let directory = directory.clone();
    streams.kx(move |kx: KxCompleted| {
        let directory = directory.clone();
        async move { directory.notify_kx(kx.uid).await.map_err(BoxError::from) }
    })
}
