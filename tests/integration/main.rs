//! Integration tests: real processes, real files, no mocks. One binary; helpers
//! in `util`, one module per area. Attack cases are named after docs/src/attacks.md.

mod util;

mod book;
mod cli;
mod contract;
mod direct;
mod docker;
mod env;
mod guest_view;
mod install;
mod invariants;
mod isolation;
mod mcp;
mod paths;
mod props;
mod streaming;
mod toolbox;
mod wasm;
mod wasm_p3;
