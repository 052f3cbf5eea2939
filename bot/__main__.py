from bot.cli.main import entry

entry()
