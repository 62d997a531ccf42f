//! `hull ca`: the installation's gateway CA (`$HULL_HOME/ca`), which brokered boxes trust and
//! the gateway signs intercepted connections with. `rotate` replaces it, for a key that may have
//! leaked or a CA near its end.

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct CaArgs {
    #[command(subcommand)]
    pub command: CaCommand,
}

#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Replace the gateway CA with a new one (made if there is none). Boxes started after trust
    /// only the new one; running gateways keep the CA they loaded until their boxes end; a
    /// named sandbox takes the new one at its next start.
    Rotate,
    /// Print the path of the gateway CA's certificate (made if there is none).
    Path,
}

/// `hull ca ...`.
pub fn main(a: &CaArgs) -> i32 {
    let dir = hull_image::default_home().join("ca");
    let cert = dir.join(hull_net::ca::CERT_FILE);
    let done = match a.command {
        CaCommand::Rotate => hull_net::ca::Ca::rotate(&dir).map(|_| {
            println!("{}", cert.display());
            eprintln!("hull: the gateway CA in {} is new; boxes started from now on trust it (running ones keep the old one until they end)", dir.display());
        }),
        CaCommand::Path => hull_net::ca::Ca::load_or_create(&dir).map(|_| println!("{}", cert.display())),
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "hull: error: the gateway CA in {}: {}",
                dir.display(),
                hull_api::Chain(&e)
            );
            125
        }
    }
}
