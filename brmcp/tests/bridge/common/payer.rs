//! The test payer: "tips" the bot by crediting its balance, or fails, hangs or credits
//! late as a test scripts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::{BoxError, PeerId};
use brmcp::bridge::Payer;

use super::BotState;

/// How the test payer behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayMode {
    /// Credit the bot at once and succeed.
    Credit,
    /// Succeed, but credit the bot only after this delay (credit in flight).
    CreditLate(Duration),
    /// Succeed without ever crediting.
    NeverCredit,
    /// Fail with "no route to bot".
    Fail,
    /// Never settle.
    Hang,
    /// Credit the bot and succeed, after this delay (a slow tip).
    Slow(Duration),
    /// Give up waiting: [`brmcp::bridge::PaymentUnconfirmed`].
    Unconfirmed,
    /// Credit the bot, yet report [`brmcp::bridge::PaymentUnconfirmed`]: the tip
    /// went through as the payer's connection dropped.
    CreditUnconfirmed,
}

/// What the payer did.
pub struct PayerState {
    pub bot: Arc<BotState>,
    pub payer_id: PeerId,
    pub mode: Mutex<PayMode>,
    /// Payments asked for: (bot, atoms).
    pub payments: Mutex<Vec<(PeerId, u64)>>,
}

impl PayerState {
    /// A payer `payer_id` paying `bot` (whose balances a crediting mode credits), in
    /// `mode`, having paid nothing yet.
    pub fn new(bot: Arc<BotState>, payer_id: PeerId, mode: PayMode) -> Arc<Self> {
        Arc::new(Self {
            bot,
            payer_id,
            mode: Mutex::new(mode),
            payments: Mutex::default(),
        })
    }

    pub fn count(&self) -> usize {
        self.payments.lock().unwrap().len()
    }
}

#[derive(Clone)]
pub struct TestPayer(pub Arc<PayerState>);

impl Payer for TestPayer {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.0.payments.lock().unwrap().push((bot, atoms));
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            PayMode::Credit => {
                self.0.bot.credit(self.0.payer_id, atoms);
                Ok(())
            }
            PayMode::CreditLate(delay) => {
                let state = self.0.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    state.bot.credit(state.payer_id, atoms);
                });
                Ok(())
            }
            PayMode::NeverCredit => Ok(()),
            PayMode::Fail => Err("no route to bot".into()),
            PayMode::Hang => std::future::pending().await,
            PayMode::Slow(delay) => {
                tokio::time::sleep(delay).await;
                self.0.bot.credit(self.0.payer_id, atoms);
                Ok(())
            }
            PayMode::Unconfirmed => Err(brmcp::bridge::PaymentUnconfirmed.into()),
            PayMode::CreditUnconfirmed => {
                self.0.bot.credit(self.0.payer_id, atoms);
                Err(brmcp::bridge::PaymentUnconfirmed.into())
            }
        }
    }
}
