//! What agents can call: the file tools, and the [`toolbox::Toolbox`] that
//! puts them, the shell and the WASI tools (see
//! [`crate::backend::wasm::registry`]) behind policy and the session's rate
//! limit.

pub mod fs;
pub mod toolbox;
