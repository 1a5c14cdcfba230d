//! `settee rmdb`: delete a database. Asks on the terminal (the database
//! name must be typed back) unless `--yes`; without a terminal and without
//! `--yes` it refuses, so a script never deletes by accident.

use std::io::{BufRead, IsTerminal, Write};

use super::conn::{explain, ConnArgs};
use super::ToolError;

pub const EXAMPLES: &str = "Examples:
  settee rmdb testp             # asks: type the database name to confirm
  settee rmdb testp --yes       # in scripts";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Database URL (http(s)://user:pass@host:port/db) or name on --server.
    pub db: String,
    /// Delete without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub async fn run(args: Args) -> Result<(), ToolError> {
    let client = args.conn.client()?;
    let db = args.conn.db(&client, &args.db)?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(ToolError::Fatal(format!(
                "refusing to delete {} without confirmation: stdin is not a terminal (pass --yes)",
                db.display()
            )));
        }
        let info = db.info().await.map_err(|e| explain(&db, "", e))?;
        eprint!(
            "Delete database {} ({} documents)? Type its name to confirm: ",
            db.display(),
            info.doc_count
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| ToolError::Fatal(format!("cannot read the answer: {e}")))?;
        if answer.trim() != db.name() {
            return Err(ToolError::Fatal("not confirmed; nothing deleted".into()));
        }
    }
    db.delete().await.map_err(|e| explain(&db, "", e))?;
    eprintln!("settee rmdb: deleted {}", db.display());
    Ok(())
}
