//! What agents can call: today the registry of WASI tools.

pub mod registry;
