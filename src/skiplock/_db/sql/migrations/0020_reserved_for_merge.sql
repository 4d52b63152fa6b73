-- Reserved: another branch's migration takes this number when the branches are merged (this
-- file then goes).  Migrations are numbered without gaps, so the branch needs one here.
COMMENT ON SCHEMA {schema} IS NULL;
