"""The probe that runs inside each environment (run as a script; it never imports envmatrix)."""
