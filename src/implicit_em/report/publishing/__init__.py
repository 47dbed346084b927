"""Publishing the full-size report and checking that it still matches its inputs."""
