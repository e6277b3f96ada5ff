//! Transports translate between a wire and the dispatcher; they hold no
//! business logic.

pub mod http;
pub mod ws;
