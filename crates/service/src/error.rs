//! Why the service cannot start or put new settings in force. Each part names its own
//! problem in one line (the key and the file, or the line of a token file); this enum
//! gathers them for [`crate::state::Service`] and reload. Messages speak of config keys,
//! never of command-line flags: the binary words those.

use crate::auth::TokenError;
use crate::config::{LifetimeError, LimitsError};
use crate::listen::ListenError;
use crate::tls::TlsError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Tokens(#[from] TokenError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error(transparent)]
    Lifetime(#[from] LifetimeError),
}
