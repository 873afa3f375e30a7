"""Authentication and authorization: SCRAM logins, the users in admin.system.users, built-in roles
and the per-command check the dispatcher runs under --auth."""
