//! `settee mkdb`: create a database (an existing one is an error).

use super::conn::{explain, ConnArgs};
use super::ToolError;

pub const EXAMPLES: &str = "Examples:
  settee mkdb testp                                  # on $SETTEE_URL or --server
  settee mkdb https://admin:pw@db.example:6984/testp --cacert ca.pem";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Database URL (http(s)://user:pass@host:port/db) or name on --server.
    pub db: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub async fn run(args: Args) -> Result<(), ToolError> {
    let client = args.conn.client()?;
    let db = args.conn.db(&client, &args.db)?;
    match db.create().await {
        Ok(()) => {
            eprintln!("settee mkdb: created {}", db.display());
            Ok(())
        }
        Err(e) if e.status() == Some(412) => Err(ToolError::Fatal(format!(
            "database {} already exists",
            db.display()
        ))),
        Err(e) if e.is_not_found() => Err(ToolError::Fatal(format!("{}: {e}", db.display()))),
        Err(e) => Err(explain(&db, "", e)),
    }
}
