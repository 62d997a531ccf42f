//! `hull import`, `hull images`, `hull rmi`: the local image store.

use std::path::PathBuf;

use clap::Args;
use hull_box::size::Human;
use hull_image::{default_home, Store};

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// An OCI image layout directory, an OCI archive, or a `docker save` archive (.tar, .tar.gz).
    pub path: PathBuf,
    /// Store it under this name (default: the archive's own tag, or the digest).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Args, Debug)]
pub struct ImagesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RmiArgs {
    /// Image names to remove (their unreferenced blobs and roots are collected).
    #[arg(required = true)]
    pub names: Vec<String>,
}

fn store() -> Result<Store, i32> {
    Store::open(&default_home()).map_err(|e| {
        crate::print_error(&e);
        125
    })
}

pub fn import(args: &ImportArgs) -> i32 {
    let store = match store() {
        Ok(s) => s,
        Err(c) => return c,
    };
    match store.import(&args.path, args.name.as_deref()) {
        Ok(r) => {
            let i = &r.image;
            println!(
                "imported {} {} ({}, {} layers, {} unpacked)",
                i.name,
                i.digest,
                Human(i.size),
                r.layers,
                r.unpacked
            );
            0
        }
        Err(e) => {
            crate::print_error(&e);
            1
        }
    }
}

pub fn images(args: &ImagesArgs) -> i32 {
    let store = match store() {
        Ok(s) => s,
        Err(c) => return c,
    };
    match store.list() {
        Ok(list) => {
            if args.json {
                // The embedded `host` image first, as in the table: every name `--image` takes.
                let mut all = vec![serde_json::json!({
                    "name": "host",
                    "digest": null,
                    "embedded": true,
                })];
                all.extend(
                    list.iter()
                        .map(|i| serde_json::to_value(i).unwrap_or_default()),
                );
                println!("{}", serde_json::Value::Array(all));
            } else {
                println!("{:<40} {:<20} {:>10}", "NAME", "DIGEST", "SIZE");
                println!("{:<40} {:<20} {:>10}", "host", "(embedded)", "-");
                for i in list {
                    println!(
                        "{:<40} {:<20} {:>10}",
                        i.name,
                        &i.digest[..19.min(i.digest.len())],
                        Human(i.size).to_string()
                    );
                }
            }
            0
        }
        Err(e) => {
            crate::print_error(&e);
            1
        }
    }
}

pub fn rmi(args: &RmiArgs) -> i32 {
    let store = match store() {
        Ok(s) => s,
        Err(c) => return c,
    };
    let mut code = 0;
    for n in &args.names {
        match store.remove(n) {
            Ok(()) => println!("removed {n}"),
            Err(e) => {
                crate::print_error(&e);
                code = 1;
            }
        }
    }
    code
}
