//! What agents can call: the registry of WASI tools, the file tools, and the
//! [`toolbox::Toolbox`] that puts them (and the shell) behind policy and the
//! session's rate limit.

pub mod builtin;
pub mod fs;
pub mod registry;
pub mod toolbox;
