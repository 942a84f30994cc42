/** Body of `POST /orders`, as checked by {@link ParseCreateOrderPipe}. */
export class CreateOrderDto {
  constructor(
    /** The customer placing the order: 1 to 64 characters. */
    readonly customerId: string,
    /** Amount with at most two decimals, above 0. */
    readonly total: number,
  ) {}
}
