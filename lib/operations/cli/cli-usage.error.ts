/** A command line the CLI cannot run as given; reported with the usage, exit code 2. */
export class CliUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}
