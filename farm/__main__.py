from farm.cli import app

app()
