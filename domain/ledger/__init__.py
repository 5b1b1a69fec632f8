"""The ledger, one module a line:
- `write`: the one way in and the ways out;
- `metering`: exact metering;
- `recipients`: recipients and their change log;
- `otp`: one-time codes;
- `floor`: the floor rules no template or campaign can break;
- `reasons`: plain-words reasons;
- `views`: read models.
"""
