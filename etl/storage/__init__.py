"""Every file access, local or through fsspec (S3's conditional requests included), and temp names."""
