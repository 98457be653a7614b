//! The `mxmoe` command line: quantize, dequantize, qdq, moe, gen, check, verify, bench, info,
//! demo (one file per subcommand under `cli/`).
//!
//! Errors are printed as `error: ...` (which file, which tensor, what was expected) with exit
//! code 1; outputs are written atomically, so a failed run leaves no file behind.

mod cli;

use clap::Parser;

fn main() {
    if let Err(e) = cli::Cli::parse().run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
