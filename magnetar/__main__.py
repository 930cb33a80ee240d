from magnetar.cli import main

main()
