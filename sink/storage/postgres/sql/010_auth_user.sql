-- The SMTP AUTH user name a message came with (contract v3, "SMTP AUTH"); NULL when the
-- client did not authenticate. Never a password.
ALTER TABLE messages ADD COLUMN auth_user TEXT;
