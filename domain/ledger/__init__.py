"""The ledger, one module a line:
- `write`: the one way in and the ways out;
- `send`: the send API's way in (one message checked, then written through `write`);
- `metering`: exact metering;
- `recipients`: recipients and their change log;
- `otp`: one-time codes;
- `floor`: the floor rules no template or campaign can break;
- `reasons`: plain-words reasons;
- `views`: read models;
- `sql`: its statements, named (the way in and out, recipients, one-time codes, templates);
- `sql_metering`: metering's statements;
- `sql_reads`: the read models' statements.
"""
