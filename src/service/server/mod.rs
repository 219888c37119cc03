//! The HTTP surface of `infradev serve`: the webhook intake and the health and metrics
//! endpoints. The webhook handler only verifies, stores and wakes the processor.

mod intake;
mod metrics;
mod pages;
mod results;
mod router;
mod state;
mod webhook;

pub use intake::Intake;
pub use metrics::install_metrics;
pub use router::{Draining, create_app};
pub use state::{AppState, Pages};
pub use webhook::note_refused;
