//! The `toolhost` command: parse arguments, run the subcommand, exit with its code.
#![deny(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
