"""The matrix file: bounded YAML, validated into typed profiles and scenarios."""
