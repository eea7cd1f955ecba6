//! `steward auth ...` (authentication on and off, who am I) and `steward user ...` (users and
//! their roles), as tables or exact JSON. A new or rotated token is printed once, on stdout,
//! with the line that puts it in STEWARD_TOKEN.

use serde_json::{json, Value};

use super::render::{self, Table};
use super::{GlobalOpts, OutputFormat};
use crate::client::{AuthStatusReply, UserInfo, UserReply};

#[derive(Debug, clap::Subcommand)]
pub enum AuthCommand {
    /// Whether authentication is on, and who you are.
    Status,
    /// Turn authentication on: every call then needs a bearer token or a client certificate
    /// naming a user. Refused unless a user holds the admin role.
    Enable,
    /// Turn authentication off (admin).
    Disable,
}

#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Add a user; prints its bearer token once.
    Add(UserAddArgs),
    /// List users.
    #[command(alias = "ls")]
    List,
    /// Show one user.
    Get(UserNameArg),
    /// Grant roles to a user.
    Grant(UserRolesArgs),
    /// Revoke roles from a user.
    Revoke(UserRolesArgs),
    /// Issue a new bearer token (the old one stops working), or remove it with --none.
    Token(UserTokenArgs),
    /// Delete a user.
    #[command(alias = "rm")]
    Delete(UserNameArg),
}

#[derive(Debug, clap::Args)]
pub struct UserAddArgs {
    /// 1-64 ASCII letters, digits, '-', '_', '.'; also the common name of its client
    /// certificate, if it uses one.
    pub name: String,
    /// A role to hold (repeat for more): admin, read-only, read-write:NAMESPACE, worker.
    #[arg(long = "role", short = 'r')]
    pub roles: Vec<String>,
    /// No bearer token: the user logs in only with a client certificate naming it.
    #[arg(long)]
    pub no_token: bool,
}

#[derive(Debug, clap::Args)]
pub struct UserNameArg {
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct UserRolesArgs {
    pub name: String,
    /// Roles: admin, read-only, read-write:NAMESPACE, worker.
    #[arg(required = true)]
    pub roles: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct UserTokenArgs {
    pub name: String,
    /// Remove the token instead (certificate only from then on).
    #[arg(long)]
    pub none: bool,
}

pub async fn run_auth(cmd: AuthCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let reply = match cmd {
        AuthCommand::Status => client.auth_status().await?,
        AuthCommand::Enable => client.auth_enable(true).await?,
        AuthCommand::Disable => client.auth_enable(false).await?,
    };
    let text = match global.output {
        OutputFormat::Table => status_text(&reply),
        format => render::structured(&status_json(&reply), format)?,
    };
    print!("{text}");
    Ok(())
}

fn status_text(reply: &AuthStatusReply) -> String {
    let state = if reply.enabled { "on" } else { "off" };
    let mut text = format!(
        "Authentication: {state} (auth revision {})\n",
        reply.revision
    );
    if !reply.user.is_empty() {
        text.push_str(&format!(
            "You are:        {} (roles {})\n",
            reply.user,
            roles_text(&reply.roles)
        ));
    }
    text
}

fn status_json(reply: &AuthStatusReply) -> Value {
    json!({
        "enabled": reply.enabled,
        "revision": reply.revision,
        "user": reply.user,
        "roles": reply.roles,
    })
}

pub async fn run_user(cmd: UserCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let format = global.output;
    let text = match cmd {
        UserCommand::Add(args) => {
            let reply = client
                .user_add(&args.name, &args.roles, args.no_token)
                .await?;
            user_reply_text(&reply, format)?
        }
        UserCommand::List => {
            let reply = client.user_list().await?;
            match format {
                OutputFormat::Table if reply.users.is_empty() => {
                    eprintln!("No users");
                    String::new()
                }
                OutputFormat::Table => users_table(&reply.users).render(),
                format => render::structured(
                    &json!({
                        "users": reply.users.iter().map(user_json).collect::<Vec<_>>(),
                        "enabled": reply.enabled,
                        "revision": reply.revision,
                    }),
                    format,
                )?,
            }
        }
        UserCommand::Get(args) => user_reply_text(&client.user_get(&args.name).await?, format)?,
        UserCommand::Grant(args) => user_reply_text(
            &client.user_roles(&args.name, &args.roles, &[]).await?,
            format,
        )?,
        UserCommand::Revoke(args) => user_reply_text(
            &client.user_roles(&args.name, &[], &args.roles).await?,
            format,
        )?,
        UserCommand::Token(args) => {
            user_reply_text(&client.user_token(&args.name, args.none).await?, format)?
        }
        UserCommand::Delete(args) => {
            client.user_delete(&args.name).await?;
            format!("user {} deleted\n", args.name)
        }
    };
    print!("{text}");
    Ok(())
}

fn roles_text(roles: &[String]) -> String {
    if roles.is_empty() {
        "-".to_string()
    } else {
        roles.join(",")
    }
}

fn users_table(users: &[UserInfo]) -> Table {
    let mut table = Table::new(&["NAME", "ROLES", "TOKEN"]);
    for u in users {
        table.row(vec![
            u.name.clone(),
            roles_text(&u.roles),
            if u.has_token { "yes" } else { "no" }.to_string(),
        ]);
    }
    table
}

fn user_json(u: &UserInfo) -> Value {
    json!({
        "name": u.name,
        "roles": u.roles,
        "hasToken": u.has_token,
        "createdMs": u.created_ms,
        "updatedMs": u.updated_ms,
    })
}

/// The user as a table (then the token and how to use it, when there is one), or as JSON with
/// the token in it.
fn user_reply_text(reply: &UserReply, format: OutputFormat) -> anyhow::Result<String> {
    let user = reply.user.clone().unwrap_or_default();
    match format {
        OutputFormat::Table => {
            let mut text = users_table(std::slice::from_ref(&user)).render();
            if !reply.token.is_empty() {
                text.push_str(&format!(
                    "\nToken (shown once; keep it secret):\n{}\n\nexport STEWARD_TOKEN={}\n",
                    reply.token, reply.token
                ));
            }
            Ok(text)
        }
        format => {
            let mut value = user_json(&user);
            if !reply.token.is_empty() {
                value["token"] = json!(reply.token);
            }
            value["revision"] = json!(reply.revision);
            render::structured(&value, format)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_is_printed_once_with_its_export_line() {
        let reply = UserReply {
            user: Some(UserInfo {
                name: "alice".into(),
                roles: vec!["read-write:team-a".into()],
                has_token: true,
                created_ms: 1,
                updated_ms: 1,
            }),
            token: "alice.secret".into(),
            revision: 3,
        };
        let text = user_reply_text(&reply, OutputFormat::Table).expect("table");
        assert!(text.contains("alice"), "{text}");
        assert!(text.contains("read-write:team-a"), "{text}");
        assert!(text.contains("export STEWARD_TOKEN=alice.secret"), "{text}");
        let json = user_reply_text(&reply, OutputFormat::Json).expect("json");
        let value: Value = serde_json::from_str(&json).expect("exact JSON");
        assert_eq!(value["token"], "alice.secret");
        assert_eq!(value["roles"][0], "read-write:team-a");
        let mut without = reply.clone();
        without.token.clear();
        let text = user_reply_text(&without, OutputFormat::Table).expect("table");
        assert!(!text.contains("STEWARD_TOKEN"), "{text}");
    }
}
