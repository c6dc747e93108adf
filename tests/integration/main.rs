//! Integration tests: real processes, real files, no mocks. One binary; helpers
//! in `util`, one module per area. Attack cases are named after ATTACKS.md.

mod util;

mod cli;
mod direct;
mod docker;
mod env;
mod isolation;
mod mcp;
mod paths;
mod toolbox;
mod wasm;
